"""``tmlauncher``: start a session from a cfg file (flags override cfg values).

    tmlauncher -cfg=launch_session.cfg
    tmlauncher --config launch_session.cfg --devices cpu0,cpu1,cpu2 --set N_EPOCHS=5

Bad input ends with one line ``tmlauncher: error: ...`` and exit code 2 before
any rank starts; a failed session ends with a line naming the failed rank and
mpiexec's non-zero exit code.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from theanompi.core.errors import ConfigError
from theanompi.launch.cfg import read_cfg_file, session_request
from theanompi.launch.handles import Session
from theanompi.launch.mpiexec import raise_interrupted
from theanompi.launch.plan import plan_session

log = logging.getLogger("theanompi")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tmlauncher", description="Launch a theanompi training session.")
    parser.add_argument("-cfg", "--config", required=True, metavar="FILE", help="session cfg file (KEY=VALUE lines)")
    parser.add_argument("--rule", help="override RULE")
    parser.add_argument("--modelfile", help="override MODELFILE")
    parser.add_argument("--modelclass", help="override MODELCLASS")
    parser.add_argument("--devices", help="override DEVICES, e.g. cpu0,cpu1")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override any cfg key")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("tmlauncher: %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        raw = read_cfg_file(args.config)
        for flag in ("rule", "modelfile", "modelclass", "devices"):
            if getattr(args, flag):
                raw[flag.upper()] = getattr(args, flag)
        for item in args.set:
            if "=" not in item:
                raise ConfigError(f"--set {item!r} is not KEY=VALUE")
            key, value = item.split("=", 1)
            raw[key.strip().upper()] = value.strip()
        request = session_request(raw)
        spec, ranks = plan_session(request)
        signal.signal(signal.SIGTERM, raise_interrupted)  # a killed launcher still stops every rank
        session = Session(request.rule).start(spec, ranks)
    except ConfigError as err:
        sys.stderr.write(f"tmlauncher: error: {err}\n")
        return 2
    assert session.run is not None
    code = session.run.wait()
    for line in session.run.remote_ends():  # ranks on other hosts: their RUN_DIR may not be this one
        log.info("%s", line)
    if code != 0:
        sys.stderr.write(f"tmlauncher: session failed: {session.failure}\n")
    else:
        for lost in session.run.lost:
            log.info("carried on without %s: it was lost during the session", lost)
        log.info("session finished; records in %s", spec.run_dir)
    return code


if __name__ == "__main__":
    sys.exit(main())
