B=${B:-http://127.0.0.1:8080}
TOKEN=$(curl -s -X POST $B/authenticate -H 'Content-Type: application/json' \
  -d '{"username": "admin", "password": "a-long-password"}' | python3 -c 'import sys, json; print(json.load(sys.stdin)["token"])')

# the application version 0.1, then optionally an API version of the controller's IO State (-1)
curl -s "$B/v0.1-1/hello/greet?name=Ada" -H "Authorization: Bearer $TOKEN"
# {"greeting": "Hello, Ada!", "askedBy": "admin"}
curl -s "$B/v9.9/hello/greet?name=Ada" -H "Authorization: Bearer $TOKEN"     # 404: this build serves 0.1

# a batch: the action once per element, each checked like a call of its own
curl -s -X POST $B/b0.1/hello/greet -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
  -d '{"batch": [{"name": "Ada"}, {"name": "Alan"}], "combine": true}'
# [{"greeting": "Hello, Ada!", "askedBy": "admin"}, {"greeting": "Hello, Alan!", "askedBy": "admin"}]

# a user has no BATCH role on hello/greet: refused before anything runs
UTOKEN=$(curl -s -X POST $B/authenticate -H 'Content-Type: application/json' \
  -d '{"username": "ada", "password": "ada-password-1"}' | python3 -c 'import sys, json; print(json.load(sys.stdin)["token"])')
curl -s -X POST $B/b0.1/hello/greet -H "Authorization: Bearer $UTOKEN" -H 'Content-Type: application/json' \
  -d '{"batch": [{"name": "Ada"}]}'                                           # 403
