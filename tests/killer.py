"""SIGKILL this process at its N-th touch of a destination (tests/test_atomic.py), with no hook inside csekit.

A touch is an audit event (``sys.addaudithook``) on the destination or an entry directly in it: the process dies
just *before* a rename or removal, or just *after* an ``open`` for writing returned (when a plain ``write_text`` has
already truncated the file).

    python tests/killer.py TARGET N csekit evaluate MODEL --output TARGET     # a command, killed at touch N
    install(target, n)                                                          # in a forked child
"""

import os
import signal
import sys


def install(target, nth: int) -> None:
    target = os.path.abspath(target)
    touches = 0

    def inside(path) -> bool:
        if not isinstance(path, (str, bytes, os.PathLike)):
            return False
        path = os.path.abspath(os.fsdecode(path))
        return path == target or os.path.dirname(path) == target

    def die(*_):
        os.kill(os.getpid(), signal.SIGKILL)

    def hook(event, args):
        nonlocal touches
        if event == "open" and inside(args[0]):
            mode, flags = args[1], args[2] or 0
            if (mode and any(c in mode for c in "wax+")) or (not mode and flags & (os.O_WRONLY | os.O_RDWR)):
                touches += 1
                if touches == nth:
                    sys.setprofile(die)  # at the next call or return: the open (and its truncation) is done
        elif event in ("os.rename", "os.remove", "os.rmdir", "shutil.rmtree") and any(map(inside, args[:2])):
            touches += 1
            if touches == nth:
                die()

    sys.addaudithook(hook)


if __name__ == "__main__":
    target, nth, program, *argv = sys.argv[1:]
    install(target, int(nth))
    if program == "csekit":
        from csekit.cli import main

        sys.exit(main(argv))
    raise SystemExit(f"unknown program {program!r}")
