#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A python3-grpcio client of sluice's rate limit service, for the RLS tests.

    rls_client.py GENERATED_DIR STEPS_JSON

GENERATED_DIR holds the Python message classes protoc made from the project's proto/
(`protoc --python_out`: envoy/service/ratelimit/v3/rls_pb2.py and its imports). STEPS_JSON is
a list of steps run in order, one answer per step printed as a JSON list on stdout:

- {"rls": PORT, "domain": D, "descriptors": [[[key, value], ...], ...], "hits": N}
  calls ShouldRateLimit on 127.0.0.1:PORT (a descriptor [key, value, hits] carries its own
  hits_addend); the answer is {"grpc": CODE_NAME, "message": ...} for a gRPC error, else
  {"grpc": "OK", "overall": CODE, "statuses": [{"code", "limit", "remaining", "reset_ms"}],
  "headers": {name: value}};
- {"http": PORT, "path": P} GETs http://127.0.0.1:PORT/P: {"status": N, "headers": {...}}.

Exits 0 when every step ran (whatever the answers), 2 on bad arguments.
"""
import json
import sys
import urllib.error
import urllib.request


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    sys.path.insert(0, sys.argv[1])
    import grpc  # Debian's python3-grpcio
    from envoy.service.ratelimit.v3 import rls_pb2

    pb = rls_pb2.RateLimitResponse
    channels = {}
    out = []
    for step in json.loads(sys.argv[2]):
        if "http" in step:
            req = urllib.request.Request(f"http://127.0.0.1:{step['http']}{step['path']}")
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    out.append({"status": r.status, "headers": dict(r.headers.items())})
            except urllib.error.HTTPError as e:
                out.append({"status": e.code, "headers": dict(e.headers.items())})
            continue
        port = step["rls"]
        if port not in channels:
            ch = grpc.insecure_channel(f"127.0.0.1:{port}")
            channels[port] = ch.unary_unary(
                "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
                request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
                response_deserializer=rls_pb2.RateLimitResponse.FromString)
        req = rls_pb2.RateLimitRequest(domain=step["domain"], hits_addend=step.get("hits", 0))
        for d in step["descriptors"]:
            desc = req.descriptors.add()
            for e in d:
                if len(e) == 3:  # [key, value, hits]: the descriptor's own hits_addend
                    desc.hits_addend.value = e[2]
                entry = desc.entries.add()
                entry.key, entry.value = e[0], e[1]
        try:
            resp = channels[port](req, timeout=10)
        except grpc.RpcError as e:
            out.append({"grpc": e.code().name, "message": e.details()})
            continue
        statuses = []
        for s in resp.statuses:
            st = {"code": pb.Code.Name(s.code)}
            if s.HasField("current_limit"):
                st["limit"] = s.current_limit.name
                st["remaining"] = s.limit_remaining
                d = s.duration_until_reset
                st["reset_ms"] = d.seconds * 1000 + d.nanos // 1_000_000
            statuses.append(st)
        out.append({
            "grpc": "OK",
            "overall": pb.Code.Name(resp.overall_code),
            "statuses": statuses,
            "headers": {h.key: h.value for h in resp.response_headers_to_add},
        })
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
