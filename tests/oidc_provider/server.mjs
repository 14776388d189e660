// A real OpenID provider for apid's tests: panva's oidc-provider, unchanged, on loopback.
// Usage: node server.mjs CONFIG.json PORT. The JSON file names the issuer, the signing keys
// (private JWKs), the clients (each with the claims its tokens carry) and the resource servers
// (each with the audience and algorithm of its JWT access tokens). Clients get tokens with the
// client credentials grant. SIGHUP reads the file again (a key rotation); each request is
// logged on standard output, so a test can count what apid fetched.
import * as fs from 'node:fs';
import * as http from 'node:http';
import Provider, { errors } from 'oidc-provider';

const [configFile, port] = process.argv.slice(2);

function provider() {
  const config = JSON.parse(fs.readFileSync(configFile, 'utf8'));
  const claims = Object.fromEntries(config.clients.map((client) => [client.id, client.claims || {}]));
  return new Provider(config.issuer, {
    clients: config.clients.map((client) => ({
      client_id: client.id,
      client_secret: client.secret,
      grant_types: ['client_credentials'],
      redirect_uris: [],
      response_types: [],
    })),
    jwks: { keys: config.keys },
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => undefined,
        getResourceServerInfo(ctx, indicator) {
          const server = config.resources[indicator];
          if (!server) throw new errors.InvalidTarget();
          const sign = server.alg.startsWith('HS') ? { alg: server.alg, key: server.key } : { alg: server.alg };
          return {
            audience: server.audience,
            scope: 'api',
            accessTokenFormat: 'jwt',
            accessTokenTTL: server.ttl || 600,
            jwt: { sign },
          };
        },
      },
    },
    extraTokenClaims: (ctx, token) => claims[token.clientId],
    ttl: { ClientCredentials: 600 },
  }).callback();
}

let serve = provider();
let reloads = 0;
const server = http.createServer((request, response) => {
  console.log(`request ${request.method} ${request.url}`);
  serve(request, response);
});
process.on('SIGHUP', () => {
  serve = provider();
  reloads += 1;
  console.log(`reloaded ${reloads}`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
server.listen(Number(port), '127.0.0.1', () => {
  console.log(`provider ready on http://127.0.0.1:${server.address().port}`);
});
