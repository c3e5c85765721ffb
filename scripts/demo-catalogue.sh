#!/usr/bin/env bash
# demo-catalogue.sh BASE_URL ADMIN_TOKEN: load a small demo catalogue into an empty shop, so a
# fresh `make run` shows something to buy: six items in three categories, one behind a waiting
# room, one starting tomorrow, one nearly sold out. A shop that has items is left alone, and
# FLASHSALE_DEMO_CATALOGUE=false skips it altogether. Uses the admin import route only.
set -euo pipefail
base=$1 token=$2

case "${FLASHSALE_DEMO_CATALOGUE:-true}" in
  false | 0 | no | off) exit 0 ;;
esac
items=$(curl -fsS "$base/api/items?limit=1") || { echo "demo catalogue: cannot read $base/api/items" >&2; exit 0; }
case "$items" in
  *'"items":[]'*) ;;
  *) exit 0 ;; # the shop has items: they are the operator's
esac

# GNU date, else BSD date (macOS).
at() { date -u -d "$1" +%Y-%m-%dT%H:%M:%SZ 2>/dev/null || date -u -v"$2" +%Y-%m-%dT%H:%M:%SZ; }
in_2h=$(at '+2 hours' +2H)
in_8h=$(at '+8 hours' +8H)
tomorrow=$(at '+1 day' +1d)
tomorrow_end=$(at '+2 days' +2d)

reply=$(curl -fsS -X POST "$base/api/admin/items/import" \
  -H "Authorization: Bearer $token" -H 'Content-Type: application/json' --data-binary @- <<EOF
[
 {"id": "aurora-x1", "name": "Aurora X1 smartphone, 128 GB", "category": "phones", "price_cents": 49900, "stock": 40, "per_user_limit": 1, "ends_at": "$in_2h",
  "queue": {"admit_per_second": 20, "max_active": 50, "pass_ttl_seconds": 120}},
 {"id": "nova-mini", "name": "Nova Mini smartphone", "category": "phones", "price_cents": 29900, "stock": 3, "per_user_limit": 1, "ends_at": "$in_8h"},
 {"id": "studio-headphones", "name": "Studio wireless headphones", "category": "audio", "price_cents": 12900, "stock": 120, "per_user_limit": 2, "ends_at": "$in_8h"},
 {"id": "pocket-speaker", "name": "Pocket Bluetooth speaker", "category": "audio", "price_cents": 3900, "stock": 250, "per_user_limit": 3},
 {"id": "espresso-one", "name": "Espresso One coffee machine", "category": "home", "price_cents": 19900, "stock": 60, "per_user_limit": 1, "starts_at": "$tomorrow", "ends_at": "$tomorrow_end"},
 {"id": "robot-vacuum", "name": "Robot vacuum cleaner", "category": "home", "price_cents": 24900, "stock": 25, "per_user_limit": 1, "ends_at": "$in_8h"}
]
EOF
) || { echo "demo catalogue: the import failed" >&2; exit 0; }
echo "demo catalogue loaded ($reply); FLASHSALE_DEMO_CATALOGUE=false skips it" >&2
