B=${B:-http://127.0.0.1:8080}   # the daemon's address: make run's, unless B is set

# the daemon answers; the version is the one in every API path
curl -s $B/health
# {"status":"pass","version":"0.1"}

# the first administrator (skip this if you made it in the README's tour)
echo 'a-long-password' | .venv/bin/apid user add admin --email admin@example.com --role ROLE_ADMIN --password-stdin
# apid: created user admin (id 1) with roles ROLE_ADMIN

# log in: the answer is {"token": "<JWT>"}; keep the token
TOKEN=$(curl -s -X POST $B/authenticate -H 'Content-Type: application/json' \
  -d '{"username": "admin", "password": "a-long-password"}' | python3 -c 'import sys, json; print(json.load(sys.stdin)["token"])')

# your own account, through the first-party person controller
curl -s $B/v0.1/person/show/1 -H "Authorization: Bearer $TOKEN"
# {"id": 1, "version": 0, "username": "admin", "email": "admin@example.com", ...}

# every endpoint installed, with its method and the roles that may call it
.venv/bin/apid routes | grep person/show
# GET /v0.1/person/show roles=["ROLE_ADMIN", "ROLE_USER"] batch=["ROLE_ADMIN", "ROLE_USER"]
