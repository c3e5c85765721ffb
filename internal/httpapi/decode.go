package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/gin-gonic/gin"
)

// readBody reads at most limit bytes of the request body; more is errTooLarge.
func readBody(c *gin.Context, limit int64) ([]byte, error) {
	if c.Request.ContentLength > limit {
		return nil, errTooLarge
	}
	b, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, limit))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, errTooLarge
	}
	if err != nil {
		return nil, errInvalid("could not read the request body")
	}
	return b, nil
}

// decodeJSON strictly decodes one JSON object: unknown fields, trailing data and wrong
// types are 400 invalid_request.
func decodeJSON(c *gin.Context, limit int64, v any) error {
	b, err := readBody(c, limit)
	if err != nil {
		return err
	}
	return strictUnmarshal(b, v)
}

func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return errInvalid("request body must be a JSON object")
		}
		return errInvalid(fmt.Sprintf("malformed JSON: %v", err))
	}
	// Only JSON whitespace may follow the value. (Decoder.More is no test for that: it reports
	// false before a stray '}' or ']', so `{"quantity":2}}` would pass as valid.)
	for _, c := range b[dec.InputOffset():] {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return errInvalid("malformed JSON: trailing data after the object")
		}
	}
	return nil
}
