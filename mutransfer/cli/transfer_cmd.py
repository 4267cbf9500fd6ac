"""`mutransfer transfer`: Algorithm 1 from the command line."""

from __future__ import annotations

import argparse

from mutransfer.cli.common import non_negative_float, positive_float, positive_int, print_json, unit_interval


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "transfer",
        help="rescale muP proxy hyperparameters from K_proxy to K_target (Algorithm 1)",
        description="Rescale hyperparameters tuned on a muP proxy with K_proxy modes to a target with K_target modes. "
        "The master LR carries over; the effective spectral LR and init std scale by sqrt(log Kp / log Kt).",
    )
    p.add_argument("--dim", type=positive_int, required=True, help="number of truncated dimensions d (1, 2 or 3)")
    p.add_argument("--proxy-K", dest="proxy_modes", type=positive_int, required=True, help="modes of the proxy")
    p.add_argument("--target-K", dest="target_modes", type=positive_int, required=True, help="modes of the target")
    p.add_argument("--lr", type=positive_float, required=True, help="the proxy's master learning rate")
    p.add_argument("--init-std", type=positive_float, help="the proxy's effective spectral init std")
    p.add_argument("--batch-size", type=positive_int, help="carried over unchanged")
    p.add_argument("--beta2", type=unit_interval, help="carried over unchanged")
    p.add_argument("--weight-decay", type=non_negative_float, help="carried over unchanged")
    p.add_argument("--clip-value", type=positive_float, help="carried over unchanged")
    p.add_argument("--json", action="store_true", help="print the record as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from operators.transfer import transfer_hyperparameters

    unchanged = {
        name: getattr(args, name)
        for name in ("batch_size", "beta2", "weight_decay", "clip_value")
        if getattr(args, name) is not None
    }
    record = transfer_hyperparameters(
        args.dim, args.proxy_modes, args.target_modes, lr=args.lr, init_std=args.init_std, unchanged=unchanged
    )
    if args.json:
        print_json(record.as_dict())
    else:
        print(record.format_table())
    return 0
