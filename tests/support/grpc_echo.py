# SPDX-License-Identifier: Apache-2.0
"""A gRPC echo service and client (Debian's python3-grpcio), without protobuf: bytes in, bytes
out (identity serializers).

  grpc_echo.py server PORT [CERT KEY]
                                 serves /echo.Echo/Unary (the request back, trailing metadata
                                 x-echo-trailer: yes), /echo.Echo/Stream (the request back
                                 three times, `-0`, `-1`, `-2` appended) and /echo.Echo/Collect
                                 (client streaming: the requests joined by `+`) on
                                 127.0.0.1:PORT (h2c, or TLS with CERT and KEY: ALPN h2);
                                 prints `ready`, then `call <method>` per call it sees.
  grpc_echo.py client TARGET STEPS
                                 runs STEPS (a JSON list of {"method": "unary"|"stream"|
                                 "collect" (its payload split at `,` into messages),
                                 "key": API key or "", "payload": text}) against TARGET in
                                 order; prints a JSON list of answers: code (the status name),
                                 details, messages, initial and trailing metadata.
"""
import json
import sys
from concurrent import futures

import grpc


def serve(port, cert=None, key=None):
    def unary(request, context):
        print("call Unary", flush=True)
        context.set_trailing_metadata((("x-echo-trailer", "yes"),))
        return request

    def stream(request, context):
        print("call Stream", flush=True)
        context.set_trailing_metadata((("x-echo-trailer", "stream"),))
        for i in range(3):
            yield request + b"-" + str(i).encode()

    def collect(requests, context):
        print("call Collect", flush=True)
        context.set_trailing_metadata((("x-echo-trailer", "collect"),))
        return b"+".join(requests)

    handler = grpc.method_handlers_generic_handler(
        "echo.Echo",
        {
            "Unary": grpc.unary_unary_rpc_method_handler(unary),
            "Stream": grpc.unary_stream_rpc_method_handler(stream),
            "Collect": grpc.stream_unary_rpc_method_handler(collect),
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((handler,))
    if cert:
        with open(cert, "rb") as c, open(key, "rb") as k:
            creds = grpc.ssl_server_credentials(((k.read(), c.read()),))
        server.add_secure_port("127.0.0.1:%d" % port, creds)
    else:
        server.add_insecure_port("127.0.0.1:%d" % port)
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


def metadata(md):
    return {k: v if isinstance(v, str) else v.decode("latin-1") for k, v in (md or ())}


def client(target, steps):
    out = []
    with grpc.insecure_channel(target) as channel:
        for step in steps:
            md = [("x-api-key", step["key"])] if step.get("key") else []
            payload = step["payload"].encode()
            answer = {"messages": []}
            try:
                if step["method"] == "collect":
                    parts = [p.encode() for p in step["payload"].split(",")]
                    reply, call = channel.stream_unary("/echo.Echo/Collect").with_call(
                        iter(parts), metadata=md, timeout=10)
                    answer["messages"].append(reply.decode())
                elif step["method"] == "unary":
                    reply, call = channel.unary_unary("/echo.Echo/Unary").with_call(
                        payload, metadata=md, timeout=10)
                    answer["messages"].append(reply.decode())
                else:
                    call = channel.unary_stream("/echo.Echo/Stream")(payload, metadata=md, timeout=10)
                    for reply in call:
                        answer["messages"].append(reply.decode())
                answer["code"] = call.code().name
                answer["details"] = call.details() or ""
                answer["initial"] = metadata(call.initial_metadata())
                answer["trailing"] = metadata(call.trailing_metadata())
            except grpc.RpcError as e:
                answer["code"] = e.code().name
                answer["details"] = e.details() or ""
                answer["initial"] = metadata(e.initial_metadata())
                answer["trailing"] = metadata(e.trailing_metadata())
            out.append(answer)
    print(json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1] == "server":
        serve(int(sys.argv[2]), *sys.argv[3:5])
    else:
        client(sys.argv[2], json.loads(sys.argv[3]))
