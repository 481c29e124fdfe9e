"""``tmlauncher`` (also ``python -m theanompi``): start a session from a cfg file (flags override cfg values).

    tmlauncher -cfg=launch_session.cfg
    tmlauncher --config launch_session.cfg --devices cpu0,cpu1,cpu2 --set N_EPOCHS=5
    tmlauncher -cfg=launch_session.cfg --hostfile hosts.txt --dry-run
    tmlauncher --model-options theanompi.models.zoo.resnet:ResNet32     # its MODEL_* options, defaults, help
    tmlauncher -cfg=launch_session.cfg --model-options                  # those of the cfg's model

Without DEVICES (cfg or ``--devices``) the devices come from ``--hostfile`` or the Slurm or PBS allocation the
launcher runs in (:mod:`theanompi.launch.allocation`), and the first line says so. Bad input ends with one line
``tmlauncher: error: ...`` and exit code 2 before any rank starts; a failed session ends with a line naming the
failed rank and mpiexec's non-zero exit code.

Example
-------
>>> build_parser().parse_args(["-cfg=s.cfg", "--hostfile", "hosts", "--dry-run"]).dry_run
True
>>> build_parser().parse_args(["-cfg=s.cfg", "--model-options"]).model_options
''
>>> devices_from_allocation({"DEVICES": "cpu0"}, None, {"PBS_NODEFILE": "/nodes"})
'devices from DEVICES (the PBS allocation is not used)'
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Mapping
from dataclasses import replace

from theanompi.core.errors import ConfigError
from theanompi.core.session_options import SessionOptions
from theanompi.core.version import VERSION
from theanompi.launch.allocation import allocation_source, read_allocation
from theanompi.launch.cfg import read_cfg_file, session_request
from theanompi.launch.discovery import DeviceSource, discovered_devices
from theanompi.launch.dry_run import describe_launch
from theanompi.launch.elastic import within_max_workers
from theanompi.launch.handles import Session
from theanompi.launch.mpiexec import exit_code_of, interrupted_line, raise_interrupted
from theanompi.launch.options_help import describe_model_options, split_model_reference
from theanompi.launch.plan import load_model, plan_session, session_argv

log = logging.getLogger("theanompi")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tmlauncher", description="Launch a theanompi training session.")
    parser.add_argument("--version", action="version", version=f"tmlauncher (theanompi) {VERSION}")
    parser.add_argument("-cfg", "--config", metavar="FILE", help="session cfg file (KEY=VALUE lines); required")
    parser.add_argument("--rule", help="override RULE")
    parser.add_argument("--modelfile", help="override MODELFILE")
    parser.add_argument("--modelclass", help="override MODELCLASS")
    parser.add_argument("--devices", help="override DEVICES, e.g. cpu0,cpu1")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override any cfg key")
    parser.add_argument("--hostfile", metavar="FILE",
                        help="Open MPI hostfile (HOST slots=N lines): one cpu worker per slot, where DEVICES is not "
                             "given (inside a Slurm or PBS allocation the allocation is read without it)")
    parser.add_argument("--dry-run", action="store_true",
                        help="check and plan the session, print the mpiexec command line and each rank's "
                             "environment, start nothing")
    parser.add_argument("--model-options", nargs="?", const="", metavar="MODELFILE:MODELCLASS",
                        help="print the model's MODEL_* options (cfg key, help, values, default) and exit; "
                             "without MODELFILE:MODELCLASS, those of the -cfg file's model")
    return parser


def devices_from_allocation(raw: dict[str, str], hostfile: str | None, environ: Mapping[str, str]) -> str | None:
    """Fill in DEVICES from HOST_DISCOVERY, ``--hostfile`` or the batch job's allocation where the cfg and flags
    left it out; return the line that says where the devices come from (None when there is no allocation and no
    hostfile)."""
    script = raw.get("HOST_DISCOVERY", "").strip()
    if script and not raw.get("DEVICES"):
        raw["DEVICES"] = discovered_devices(script, os.getcwd(), "cpu", environ)
        return f"devices from HOST_DISCOVERY={script}: {raw['DEVICES']}"
    source = allocation_source(environ, hostfile)
    if source is None:
        if not raw.get("DEVICES"):
            raise ConfigError("cfg: required key DEVICES is missing: give DEVICES (or --devices), a --hostfile, "
                              "or launch inside a Slurm or PBS allocation")
        return None
    if raw.get("DEVICES"):
        return f"devices from DEVICES ({source} is not used)"
    limit = SessionOptions.schema()["max_ranks_per_host"].convert(raw.get("MAX_RANKS_PER_HOST", "0"))
    allocation = read_allocation(environ, hostfile, max_per_host=limit)
    assert allocation is not None  # there is a source
    raw["DEVICES"] = allocation.devices
    return f"devices from {allocation.source}: {allocation.devices}"


def read_raw(args: argparse.Namespace) -> dict[str, str]:
    """The cfg file's keys with the command line's overrides (``--rule`` ..., ``--set KEY=VALUE``)."""
    raw = read_cfg_file(args.config)
    for flag in ("rule", "modelfile", "modelclass", "devices"):
        if getattr(args, flag):
            raw[flag.upper()] = getattr(args, flag)
    for item in args.set:
        if "=" not in item:
            raise ConfigError(f"--set {item!r} is not KEY=VALUE")
        key, value = item.split("=", 1)
        raw[key.strip().upper()] = value.strip()
    return raw


def model_options_help(args: argparse.Namespace) -> list[str]:
    """What ``--model-options`` prints: the options of MODELFILE:MODELCLASS, or of the cfg's model."""
    if args.model_options:
        modelfile, modelclass = split_model_reference(args.model_options)
    else:
        raw = read_raw(args)
        modelfile, modelclass = raw.get("MODELFILE", ""), raw.get("MODELCLASS", "")
    model_cls = load_model(modelfile, modelclass, os.getcwd())
    return describe_model_options(model_cls, f"{modelfile}:{modelclass}")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.config is None and not args.model_options:
        parser.error("the following arguments are required: -cfg/--config"
                     + (" (--model-options without MODELFILE:MODELCLASS lists the cfg's model's)"
                        if args.model_options == "" else ""))
    if args.model_options is not None:
        try:
            sys.stdout.write("".join(f"{line}\n" for line in model_options_help(args)))
        except ConfigError as err:
            sys.stderr.write(f"tmlauncher: error: {err}\n")
            return 2
        return 0
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("tmlauncher: %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        raw = read_raw(args)
        said = devices_from_allocation(raw, args.hostfile, os.environ)
        if said:
            log.info("%s", said)
        request = session_request(raw)
        allocated = said is not None and not said.startswith("devices from DEVICES")
        if allocated:  # an allocation or discovery may offer more than MAX_WORKERS
            request = replace(request, devices=within_max_workers(request.rule, request.devices, request.options))
        spec, ranks = plan_session(request)
        if args.dry_run:
            sys.stdout.write("".join(f"{line}\n" for line in describe_launch(spec, ranks, session_argv(spec, ranks))))
            return 0
        # a killed launcher still stops every rank; SIGINT too when the launcher's parent ignored it (a script's
        # background job: ``tmlauncher ... &``), as torchrun does
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, raise_interrupted)
        source = (DeviceSource.allocation(os.environ, args.hostfile)
                  if allocated and not request.options.host_discovery else None)
        session = Session(request.rule).start(spec, ranks, source)
    except ConfigError as err:
        sys.stderr.write(f"tmlauncher: error: {err}\n")
        return 2
    except KeyboardInterrupt as err:  # while mpiexec was being started (MpiexecRun ends what it had started)
        sys.stderr.write(f"tmlauncher: session failed: {interrupted_line(err, 'while starting')}\n")
        return exit_code_of(err)
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
