"""A fuzzer for relay-shell's whole surface, driven through real transports (issue 21).

- `values`: JSON values a hostile or careless client sends (boundary numbers, wrong types, deep nesting, huge
  lists, unicode edge cases, NUL, lone surrogates), written as JSON text Python's own encoder cannot write.
- `calls`: tool calls generated from the tools' own inputSchemas, prompt/resource/completion requests, and
  malformed JSON-RPC messages, each with what JSON-RPC and MCP say the answer must be.
- `peers`: a raw stdio peer (a real server process on pipes) and a raw streamable-HTTP peer (a real server
  process, httpx), both speaking JSON-RPC lines the SDK client would refuse to send.
- `checks`: the invariants checked on every answer and on the audit log at the end.
- `campaign`: one run against one server; `Report` counts violations by invariant.
"""
