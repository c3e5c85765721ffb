# syntax=docker/dockerfile:1
# The two binaries a deployment runs (bin/api, bin/reconciler) in one small image; compose picks
# one with `command`. Base images are pinned to patch releases (a rebuild gets the same bases);
# raise GO_VERSION with go.mod's go line.
# Build: docker build -t flashsale .

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Modules first: this layer stays cached until go.mod/go.sum change.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH=amd64
# flashsale_build_info's version and commit: the context has no .git, so pass them, e.g.
# --build-arg VERSION=$(git describe --tags --always --dirty) --build-arg COMMIT=$(git rev-parse HEAD)
ARG VERSION=
ARG COMMIT=
# Static binaries (no cgo: pgx, go-redis and kafka-go are pure Go), as `make build` names them;
# the development tools of cmd/ (bench, testsummary) stay out of the image.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w -X github.com/flashsale/flashsale/internal/metrics.Version=${VERSION} -X github.com/flashsale/flashsale/internal/metrics.Commit=${COMMIT}" \
      -o /out/bin/ ./cmd/api ./cmd/reconciler

# Alpine rather than distroless/static: busybox wget lets compose health-check /readyz.
FROM alpine:3.20.3
RUN addgroup -S -g 10001 flashsale && adduser -S -D -H -u 10001 -G flashsale flashsale
COPY --from=build /out/bin/ /app/bin/
ENV PATH=/app/bin:$PATH \
    FLASHSALE_HTTP_ADDR=0.0.0.0:8080
WORKDIR /app
USER 10001:10001
# 8080: the api (contract, /metrics, web pages); 6060: admin listener (pprof) when
# FLASHSALE_ADMIN_ADDR is set, never to be published to the internet.
EXPOSE 8080 6060
CMD ["api"]
