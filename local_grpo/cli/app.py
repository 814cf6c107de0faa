"""`local-grpo app`: serve the studio on this machine (127.0.0.1 by default, never a public share link)."""

from __future__ import annotations

import ipaddress
import os
import sys

from local_grpo.errors import UserError

LOOPBACK_NAMES = ("localhost",)


def register_cli(subparsers) -> None:
    p = subparsers.add_parser("app", help="the studio: design rewards, train, watch runs live, export",
                              description="Serve the local-grpo studio (a Gradio app) in your browser.")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; anything else lets other machines run reward code here)")
    p.add_argument("--port", type=int, default=7860, help="port (default 7860)")
    p.add_argument("--runs", default="runs", help="folder holding run directories and saved rewards (default ./runs)")
    p.set_defaults(func=run_app)


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run_app(args) -> int:
    if not 0 < args.port < 65536:
        raise UserError(f"--port: {args.port} is not a port number (1-65535)")
    runs_root = os.path.abspath(args.runs)
    if os.path.exists(runs_root) and not os.path.isdir(runs_root):
        raise UserError(f"--runs: {runs_root} is not a folder")
    if not is_loopback(args.host):
        print(f"local-grpo: warning: binding {args.host}: anyone who can reach this address can run reward code "
              "and start training on this machine. Use --host 127.0.0.1 unless you trust that network.",
              file=sys.stderr)
    from apps.studio import build_app

    app = build_app(runs_root)
    shown_host = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
    print(f"local-grpo studio: http://{shown_host}:{args.port}  (runs folder {runs_root}; Ctrl+C to stop)", flush=True)
    app.launch(server_name=args.host, server_port=args.port, share=False, quiet=True)
    return 0
