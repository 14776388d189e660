// The README's tour as a TypeScript client types it, from the types openapi-typescript generates
// of the administrator's document (admin.d.ts beside this file): scripts/generated-clients
// compiles it with `tsc --strict`. Compiling is the test: a shape the document gets wrong is a
// type error here. Nothing is sent.
import type { components, paths } from "./admin";

type Json<T> = T extends { content: { "application/json": infer Body } } ? Body : never;
type ProblemOf<T> = T extends { content: { "application/problem+json": infer Body } } ? Body : never;

type Create = paths["/v0.1/person/create"]["post"];
type Update = paths["/v0.1/person/update/{id}"]["put"];
type List = paths["/v0.1/person/list"]["get"];
type Batch = paths["/b0.1/person/show"]["post"];
type BlankChainPost = paths["/c0.1/team/show/{id}"]["post"];

const created: Json<Create["responses"][200]> = { id: 2, version: 0 };
const body: Json<NonNullable<Create["requestBody"]>> = {
  username: "jdoe",
  password: "s3cret-pass",
  email: "jdoe@example.com",
};
const update: Json<NonNullable<Update["requestBody"]>> = { version: created.version, email: "john@example.com" };
const page: List["parameters"]["query"] = { offset: 0, max: 20 };

// A stale update's 409 is the conflict problem, with the version stored now.
function storedVersion(problem: ProblemOf<Update["responses"][409]>): number | undefined {
  return problem.currentVersion;
}

// A 400 is one of two problem types, told apart by `type`.
function badFields(problem: ProblemOf<Update["responses"][400]>): string[] {
  switch (problem.type) {
    case "urn:apid:problem:invalid-fields":
      return problem.errors.map((error) => error.field);
    case "urn:apid:problem:bad-request":
      return [];
  }
}

// A batch answers every output (combine) or the last; with a failed element, 207 and its index.
const batch: Json<Batch["requestBody"]> = { batch: [{ id: 1 }, { id: 999 }], combine: true };
function failedIndexes(answer: Json<Batch["responses"][207]>): number[] {
  return answer.errors.map((error) => error.index);
}

// A blankchain, sent with POST: the array form of `order`, links named as the document lists them.
const chain: components["schemas"]["BlankChain"] = {
  key: "leaderId",
  type: "blankchain",
  combine: true,
  order: [{ link: "person/show", key: "return" }],
};
const chainBody: Json<BlankChainPost["requestBody"]> = { chain };

async function call<T>(method: string, path: string, token: string, sent?: unknown): Promise<T> {
  const answer = await fetch(`http://127.0.0.1:8080${path}`, {
    method,
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: sent === undefined ? undefined : JSON.stringify(sent),
  });
  return (await answer.json()) as T;
}

export async function tour(token: string): Promise<void> {
  const made = await call<Json<Create["responses"][200]>>("POST", "/v0.1/person/create", token, body);
  await call<Json<Update["responses"][200]>>("PUT", `/v0.1/person/update/${made.id}`, token, update);
  const stale = await call<ProblemOf<Update["responses"][409]>>("PUT", `/v0.1/person/update/${made.id}`, token, update);
  console.log(storedVersion(stale), badFields, failedIndexes, page, batch);
  await call<Json<BlankChainPost["responses"][200]>>("POST", "/c0.1/team/show/1", token, chainBody);
}
