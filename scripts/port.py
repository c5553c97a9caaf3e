#!/usr/bin/env python3
"""Whether a private cluster may listen on a TCP port of 127.0.0.1, and who holds it if not.

  port.py free <port>     exit status 0 when a server could listen on 127.0.0.1:<port> now
  port.py holder <port>   one line naming the listening processes and their OS users

scripts/cluster.sh asks before it starts a server, so a taken port is found in the first
second, not in the server's log after a start that failed.
"""

import os
import pwd
import socket
import sys


def free(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # As PostgreSQL does: a port whose last connections are in TIME_WAIT is free for it.
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def listeners(port):
    """(uid, socket inode) of every socket listening on the port, IPv4 and IPv6."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as f:
                next(f)
                for line in f:
                    fields = line.split()
                    local, state, uid, inode = fields[1], fields[3], fields[7], fields[9]
                    if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                        found.append((int(uid), inode))
        except FileNotFoundError:
            pass
    return found


def processes(inodes):
    """pid -> command line of the processes that hold one of the sockets, where visible
    (another user's open files are visible to root only)."""
    wanted = {f"socket:[{i}]" for i in inodes}
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        found[int(pid)] = " ".join(f.read().decode(errors="replace").replace("\0", " ").split())
                    break
        except OSError:
            continue
    return found


def user(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def holder(port):
    held = listeners(port)
    if not held:
        return "a socket that is not listening (no listener in /proc/net/tcp)"
    users = sorted({user(uid) for uid, _ in held})
    procs = processes([inode for _, inode in held])
    if procs:
        named = "; ".join(f"pid {pid} ({cmd[:120]})" for pid, cmd in sorted(procs.items()))
        return f"{named}, OS user {', '.join(users)}"
    return f"a process of OS user {', '.join(users)} (not visible to {user(os.getuid())}: ss -ltnp as root names it)"


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("free", "holder"):
        sys.exit(__doc__)
    port = int(sys.argv[2])
    if sys.argv[1] == "free":
        sys.exit(0 if free(port) else 1)
    print(holder(port))


if __name__ == "__main__":
    main()
