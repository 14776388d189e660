B=${B:-http://127.0.0.1:8080}
TOKEN=$(curl -s -X POST $B/authenticate -H 'Content-Type: application/json' \
  -d '{"username": "admin", "password": "a-long-password"}' | python3 -c 'import sys, json; print(json.load(sys.stdin)["token"])')

# an administrator sees every field the action returned
curl -s "$B/v0.1/hello/greet?name=Ada" -H "Authorization: Bearer $TOKEN"
# {"greeting": "Hello, Ada!", "askedBy": "admin"}

# make a user and ask as that user: ROLE_USER's RESPONSE list has the greeting only
curl -s -X POST $B/v0.1/person/create -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
  -d '{"username": "ada", "password": "ada-password-1", "email": "ada@example.com"}'
UTOKEN=$(curl -s -X POST $B/authenticate -H 'Content-Type: application/json' \
  -d '{"username": "ada", "password": "ada-password-1"}' | python3 -c 'import sys, json; print(json.load(sys.stdin)["token"])')
curl -s "$B/v0.1/hello/greet?name=Ada" -H "Authorization: Bearer $UTOKEN"
# {"greeting": "Hello, Ada!"}

# the default action: the path may leave it out
curl -s "$B/v0.1/hello?name=Alan" -H "Authorization: Bearer $UTOKEN"
# {"greeting": "Hello, Alan!"}

# what IO State refuses never reaches the plugin's code: each answer is an RFC 9457 problem
curl -s $B/v0.1/hello/greet -H "Authorization: Bearer $TOKEN"                           # 400: name is required
curl -s "$B/v0.1/hello/greet?name=Ada&loud=true" -H "Authorization: Bearer $TOKEN"       # 400: loud is not a field of hello
curl -s -i -X DELETE "$B/v0.1/hello/greet?name=Ada" -H "Authorization: Bearer $TOKEN"    # 405: greet is a GET
curl -s -i "$B/v0.1/hello/greet?name=Ada"                                                # 401: no token
