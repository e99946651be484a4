"""Drive an interactive bash in a pseudo-terminal and print the terminal transcript.

Interactive shells report a job killed by SIGKILL with a bare `Killed` line (non-interactive
ones say `bash: line N: PID Killed  CMD`).  Usage: interactive_shell.py 'COMMAND' ...
Each argument is typed as one command line; `exit` is typed at the end.
"""

import os
import select
import subprocess
import sys
import time


def main():
    leader, follower = os.openpty()
    env = {**os.environ, "PS1": "$ ", "TERM": "dumb"}
    proc = subprocess.Popen(
        ["bash", "--norc", "--noprofile", "-i"],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
        start_new_session=True,
    )
    os.close(follower)
    out = bytearray()

    def pump(seconds):
        """Read until the shell prints its prompt again (or EOF, or timeout)."""
        start = len(out)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if len(out) > start and (out.endswith(b"\n$ ") or out == b"$ "):
                return True
            r, _, _ = select.select([leader], [], [], 0.1)
            if r:
                try:
                    data = os.read(leader, 65536)
                except OSError:
                    return False
                if not data:
                    return False
                out.extend(data)
        return True

    pump(5.0)
    for line in [*sys.argv[1:], "exit"]:
        os.write(leader, line.encode() + b"\n")
        pump(60.0 if line != "exit" else 5.0)
    proc.wait(timeout=10)
    sys.stdout.buffer.write(bytes(out))


if __name__ == "__main__":
    main()
