// The /docs page: Swagger UI showing the caller's OpenAPI document, and a login box.
//
// The access token lives in this closure only, never in localStorage or sessionStorage: any
// script of the origin can read those, and they outlive the page. A reload of the page logs
// out, which is what a docs page can afford.
"use strict";

(function () {
  const root = document.getElementById("swagger-ui");
  const specUrl = root.dataset.specUrl;
  const form = document.getElementById("login-form");
  const state = document.getElementById("login-state");
  const error = document.getElementById("login-error");
  const logout = document.getElementById("logout-button");
  const keyForm = document.getElementById("key-form");
  let token = null;
  let usingKey = false; // the token is an API key (apid_...), which is no login to end

  function sameOrigin(url) {
    return new URL(url, window.location.href).origin === window.location.origin;
  }

  // "Try it out" calls the daemon serving this page, whatever server the document names
  // (`baseUrl`, the default of generated clients, which may be another name of it): only here
  // does the token go, and the page's Content-Security-Policy lets it connect nowhere else.
  const apiRoot = window.location.origin + window.location.pathname.replace(/\/docs\/?$/, "");

  function onThisDaemon(url) {
    const server = ui ? ui.specSelectors.specJson().getIn(["servers", 0, "url"]) : null;
    if (!server) {
      return url;
    }
    const named = new URL(server, window.location.href).href.replace(/\/$/, "");
    return url.startsWith(named + "/") ? apiRoot + url.slice(named.length) : url;
  }

  // Every request Swagger UI makes (the document, and "Try it out") carries the token, but
  // only to this origin.
  let ui = null;
  ui = SwaggerUIBundle({
    url: specUrl,
    domNode: root,
    validatorUrl: null,
    deepLinking: false,
    tryItOutEnabled: false,
    requestInterceptor(request) {
      request.url = onThisDaemon(request.url);
      if (token !== null && sameOrigin(request.url)) {
        request.headers.Authorization = "Bearer " + token;
      }
      return request;
    },
  });

  function reloadDocument() {
    ui.specActions.download(specUrl);
  }

  // The document's bearer schemes, so that Swagger UI shows its locks closed while logged in
  // (the requests carry the token through the interceptor either way).
  function bearerSchemes() {
    const schemes = ui.specSelectors.specJson().getIn(["components", "securitySchemes"]);
    if (!schemes) {
      return [];
    }
    return schemes.filter(function (scheme) {
      return scheme.get("type") === "http" && String(scheme.get("scheme")).toLowerCase() === "bearer";
    }).keySeq().toArray();
  }

  function showAuthorized(jwt) {
    const names = bearerSchemes();
    if (jwt === null) {
      ui.authActions.logout(names);
      return;
    }
    const authorized = {};
    for (const name of names) {
      authorized[name] = { name: name, value: jwt, schema: { type: "http", scheme: "bearer" } };
    }
    ui.authActions.authorize(authorized);
  }

  // The roles are read from the token to say who is logged in; the daemon checks the token.
  function rolesOf(jwt) {
    try {
      const payload = jwt.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
      return JSON.parse(atob(payload)).roles || [];
    } catch (ignored) {
      return [];
    }
  }

  async function problemDetail(reply) {
    try {
      const body = await reply.json();
      return body.detail || body.title || reply.statusText;
    } catch (ignored) {
      return reply.statusText || "status " + reply.status;
    }
  }

  // Ends the current login on the daemon too (its refresh cookie and tokens stop working);
  // a failure leaves only a token that expires on its own.
  async function endLogin() {
    if (token === null) {
      return;
    }
    const ending = token;
    const wasKey = usingKey;
    token = null;
    usingKey = false;
    if (wasKey) {
      return; // forgetting a key is all: it stays good until revoked
    }
    try {
      await fetch("/logout", {
        method: "POST", headers: { Authorization: "Bearer " + ending }, credentials: "same-origin",
      });
    } catch (ignored) {
      // nothing more to do: the token is forgotten
    }
  }

  function showLoggedOut() {
    showAuthorized(null);
    state.textContent = "Not logged in: showing the public endpoints.";
    logout.hidden = true;
    reloadDocument();
  }

  form.addEventListener("submit", async function (event) {
    event.preventDefault();
    error.textContent = "";
    const wasLoggedIn = token !== null;
    await endLogin();
    const username = form.elements.username.value;
    let reply;
    try {
      reply = await fetch("/authenticate", {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "application/json" },
        body: JSON.stringify({ username: username, password: form.elements.password.value }),
        credentials: "same-origin",
      });
    } catch (failure) {
      reply = null;
      error.textContent = "The login could not be sent: " + failure.message;
    }
    if (reply !== null && !reply.ok) {
      error.textContent = "Login refused: " + (await problemDetail(reply));
    }
    if (reply === null || !reply.ok) {
      if (wasLoggedIn) {
        showLoggedOut();
      }
      return;
    }
    token = (await reply.json()).token;
    form.elements.password.value = "";
    const roles = rolesOf(token);
    state.textContent = "Logged in as " + username + (roles.length ? " (" + roles.join(", ") + ")" : "") +
      ": showing that account's endpoints.";
    logout.hidden = false;
    showAuthorized(token);
    reloadDocument();
  });

  // A pasted API key is sent as the token is; the page shows what the key's roles may call.
  keyForm.addEventListener("submit", async function (event) {
    event.preventDefault();
    error.textContent = "";
    await endLogin();
    const key = keyForm.elements.key.value.trim();
    keyForm.elements.key.value = "";
    if (!key.startsWith("apid_")) {
      error.textContent = "An API key starts with apid_";
      showLoggedOut();
      return;
    }
    token = key;
    usingKey = true;
    state.textContent = "Using API key " + key.slice(0, 17) + ": showing what its roles may call.";
    logout.hidden = false;
    showAuthorized(token);
    reloadDocument();
  });

  logout.addEventListener("click", async function () {
    await endLogin();
    showLoggedOut();
  });
})();
