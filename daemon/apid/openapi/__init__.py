"""OpenAPI 3.1 documents of the API: what `/openapi.json` answers and `apid openapi` prints.

`document` builds a document from the role-filtered view of `apid.openapi.view` and keeps the built
ones (`build`, `OpenApiDocuments`); `calls` and `chains` write the operations of the actions the
roles may call, `fields` the JSON Schema of their fields (from `ValueType.json_schema`);
`public` lists the public endpoints, whose operations are declared beside their handlers;
`components` holds what every document shares. What an operation is written with is below
every endpoint that declares one, in `apid.http.operations` and `apid.http.problem_schemas`.
"""
