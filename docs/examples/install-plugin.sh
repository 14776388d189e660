# install the plugin into apid's virtualenv; -e: your edits take effect at the next start
.venv/bin/pip install -e docs/examples/apid-hello

# its IO State is valid, and its endpoint is there
.venv/bin/apid iostate check | grep hello
# ok hello: apid_hello:iostate/hello.json
.venv/bin/apid routes | grep hello
# GET /v0.1/hello/greet roles=["ROLE_ADMIN", "ROLE_USER"] batch=["ROLE_ADMIN"]
