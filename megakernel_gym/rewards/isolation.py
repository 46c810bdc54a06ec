"""Least privilege for a judge worker: what the operating system lets its process do.

The candidate owns its worker process (DESIGN.md, "Trust boundary"): it may run any Python, ctypes
included, so every wall here is one the kernel keeps, not a Python rule. The candidate worker, as
set up by `isolate` before it imports torch (so every thread it ever has inherits all of it):

  pid+mount+net+ipc-namespace  PID 1 of its own PID namespace: no process of the judge's, nor the
                               wrapper that waits for it, can be named; its own network (no route
                               anywhere, its own abstract unix sockets) and System V IPC.
  store-hidden                 the results store's folder covered by an empty read-only tmpfs (its
                               other entries bound back), so the store can be neither read nor written.
  sockets-hidden               /run and /tmp covered likewise: root's daemons' unix sockets out of sight.
  minimal-dev                  a /dev of the devices a worker needs (null, zero, random, on the gpu
                               backend the NVIDIA nodes): no block devices, /dev/kmsg, /dev/kvm...
  read-only                    every mount read-only except the worker's scratch folder (workdir) and
                               its own /proc/<pid> (the CUDA driver writes there).
  environ-scrubbed             /proc/self/environ shows the scrubbed environment, not the one the
                               worker started with (secrets, the store's path).
  no-caps                      bounding, permitted, effective, inheritable and ambient sets empty
                               (still uid 0 where the Python installation is not readable by
                               `nobody`: uid 0 without capabilities on a read-only filesystem).
  no-new-privs                 no set-uid or file-capability gain through execve.
  landlock                     writes only beneath workdir (and device nodes, its own /proc/<pid>), no
                               TCP, and signals and abstract unix sockets scoped to its own processes.
  seccomp                      mount, namespace, ptrace, module, key and clock calls, io_uring, and
                               socket() of any family but AF_UNIX answered EPERM; on the cpu backend
                               also every new process, thread or socket once the worker is set up
                               (`forbid_new_tasks`, "seccomp-cpu").

The reference worker never runs candidate code but runs torch.compile baselines (subprocesses,
caches): it gets the namespaces, the hidden store and no-new-privs, and keeps a writable filesystem.

Each layer that cannot be set up (no libseccomp, an old kernel, not root) is named in the worker's
report as missing rather than failing the judge: `isolation_missing` lists them.
"""
from __future__ import annotations

import ctypes
import errno
import os
import stat
import sys

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x02000000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
NAMESPACE_FLAGS = (CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID,
                   CLONE_NEWNET)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 4096, 8192, 16384, 1 << 18
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
MOUNT_ATTR_RDONLY = 0x1
# the syscalls numbered alike on every architecture since Linux 5.1
SYS_MOUNT_SETATTR, SYS_LANDLOCK_CREATE, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT = 442, 444, 445, 446

# What every candidate worker is denied (EPERM), whatever its backend. Namespaces and mounts (the
# red-team unmounted the store's covers), tracing other processes, kernel modules, keys, clocks,
# swap, reboot; io_uring (its requests skip this filter); socket() of any family but AF_UNIX (the
# CUDA driver makes a unix socket at cuInit; hide_sockets keeps root's daemons' sockets out of
# sight). perf_event_open: the profiler's GPU activity comes from CUPTI, not perf events.
DENIED_SYSCALLS = (
    "mount", "umount2", "pivot_root", "chroot", "mount_setattr", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "unshare", "setns", "ptrace", "process_vm_readv", "process_vm_writev",
    "process_madvise", "pidfd_getfd", "kcmp", "bpf", "perf_event_open", "userfaultfd", "kexec_load",
    "kexec_file_load", "init_module", "finit_module", "delete_module", "keyctl", "add_key", "request_key",
    "open_by_handle_at", "name_to_handle_at", "swapon", "swapoff", "reboot", "settimeofday", "clock_settime",
    "clock_adjtime", "adjtimex", "acct", "quotactl", "quotactl_fd", "iopl", "ioperm", "syslog", "uselib",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "lookup_dcookie", "vhangup",
)
# The cpu backend's worker makes no process, thread or socket once set up (Triton's interpreter and
# torch at one thread run in the worker's own thread); the gpu backend's must (CUDA's and CUPTI's
# threads, Triton's ptxas and its one C build of its launcher, CUDA's unix socket).
CPU_DENIED_AFTER_SETUP = ("fork", "vfork", "execve", "execveat", "clone", "socket")
AF_UNIX = 1


class _Libc:
    """The few libc calls the set-up makes, with their C types (so no argument is truncated)."""

    def __init__(self):
        lib = ctypes.CDLL(None, use_errno=True)
        c = ctypes
        lib.mount.argtypes = [c.c_char_p, c.c_char_p, c.c_char_p, c.c_ulong, c.c_void_p]
        lib.umount2.argtypes = [c.c_char_p, c.c_int]
        lib.unshare.argtypes = [c.c_int]
        lib.prctl.argtypes = [c.c_int, c.c_ulong, c.c_ulong, c.c_ulong, c.c_ulong]
        lib.capset.argtypes = [c.c_void_p, c.c_void_p]
        lib.syscall.restype = c.c_long
        self.lib = lib

    def check(self, rc: int, what: str) -> int:
        if rc < 0:
            e = ctypes.get_errno()
            raise OSError(e, f"{what}: {os.strerror(e)}")
        return rc

    def mount(self, source, target, fstype, flags: int, data=None) -> None:
        enc = lambda s: s.encode() if isinstance(s, str) else s  # noqa: E731
        self.check(self.lib.mount(enc(source), enc(target), enc(fstype), flags, enc(data)),
                   f"mount {target}")

    def prctl(self, option: int, a: int = 0, b: int = 0, c: int = 0, d: int = 0) -> int:
        return self.check(self.lib.prctl(option, a, b, c, d), f"prctl({option})")

    def syscall(self, nr: int, *args) -> int:
        return self.check(self.lib.syscall(ctypes.c_long(nr), *args), f"syscall {nr}")


def _die_with_parent() -> None:
    try:
        import signal
        _Libc().prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: no orphaned workers if the judge dies
    except (OSError, AttributeError):  # not Linux: workers still end when the pipe closes
        pass


# ---------------------------------------------------------------------------------------
# namespaces


def enter_namespaces(role: str, judge_pid: int) -> str | None:
    """Run the rest of this worker as PID 1 of new PID and mount namespaces (and, for the
    candidate, network and IPC ones); returns their name in the child, None where none could be
    made (not root, no user namespaces).

    From inside, the judge's process and this function's waiting parent are not addressable:
    getppid() is 0 and kill() cannot name any process outside. Needs root (or user namespaces).
    """
    extra = CLONE_NEWNET | CLONE_NEWIPC if role == "candidate" else 0
    try:
        libc = _Libc()
        if libc.lib.unshare(CLONE_NEWPID | CLONE_NEWNS | extra) == 0:
            mode = "pid+mount" + ("+net+ipc" if extra else "") + "-namespace"
        elif libc.lib.unshare(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | extra) == 0:
            mode = "user+pid+mount" + ("+net+ipc" if extra else "") + "-namespace"
        else:
            return None
    except (OSError, AttributeError):
        return None
    pid = os.fork()
    if pid == 0:
        _die_with_parent()
        os.setsid()  # its own process group: kill(0, ...) reaches nothing of the judge's
        return mode
    _wait_and_mirror(pid, judge_pid)


def _wait_and_mirror(pid: int, judge_pid: int) -> None:
    """The outer process mirrors the inner one's fate to the judge, and kills it if the judge goes
    away (PR_SET_PDEATHSIG cannot do that here: it follows the judge's *thread* that started us, and
    a pool starts workers from threads that end). It runs no code of the candidate's and holds no
    pid the inside can name."""
    import signal
    import time as _time
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if os.getppid() != judge_pid:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os._exit(1)
        _time.sleep(0.2)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


# ---------------------------------------------------------------------------------------
# the filesystem


def private_mounts(libc: _Libc) -> list[str]:
    """Mounts made here stay in this namespace; a /proc of this PID namespace (the CUDA driver
    needs it to agree with getpid(), error 304 otherwise, and it shows no process of the judge's)."""
    libc.mount(None, "/", None, MS_REC | MS_PRIVATE)
    try:
        libc.mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError as e:
        return [f"no own /proc ({e.strerror})"]
    return []


def _needed_paths(workdir: str) -> list[str]:
    """What the worker itself reads: its Python, its import path, this package, its scratch folder."""
    need = [workdir, os.getcwd(), sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(__file__)]
    return [os.path.realpath(p) for p in need + [p for p in sys.path if p]]


def _beneath(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _cover(libc: _Libc, folder: str, keep) -> None:
    """Mount an empty read-only tmpfs over `folder`, with the entries `keep(name)` accepts bound
    back (with the mounts beneath them) from the folder as it was."""
    old = os.open(folder, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)  # reaches under the cover
    try:
        names = [n for n in os.listdir(f"/proc/self/fd/{old}") if keep(n)]
        libc.mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=16k,mode=0755")
        for n in names:
            src, dst = f"/proc/self/fd/{old}/{n}", os.path.join(folder, n)
            try:
                if os.path.isdir(src):
                    os.mkdir(dst)
                else:
                    open(dst, "w").close()
                libc.mount(src, dst, None, MS_BIND | MS_REC)
            except OSError:
                pass  # gone since listed: it stays hidden
        libc.mount(None, folder, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    finally:
        os.close(old)


def hide_store(libc: _Libc, store_paths: list[str], workdir: str) -> str:
    """Cover the results store's folder with an empty read-only tmpfs, so nothing in this namespace
    can read or write the store or its -wal/-shm/-journal files (ones made later included). The
    folder's other entries (the graph and kernel caches beside the default store) are bound back.
    Where the folder holds what the worker needs (the store in the repo root, say), the store's
    files are covered one by one with /dev/null instead."""
    dirs, files, whole = 0, 0, 0
    need = _needed_paths(workdir)
    # a path ending in a separator is a folder to cover whole, nothing bound back (the judge servers'),
    # covered after the store's folder, which may hold it
    for path in [p for p in store_paths if not p.endswith(os.sep)]:
        folder = os.path.realpath(os.path.dirname(os.path.abspath(path)))
        if not os.path.isdir(folder):
            continue
        store_names = {os.path.basename(path) + s for s in ("", "-wal", "-shm", "-journal")}
        if folder != "/" and not any(_beneath(p, folder) for p in need):
            _cover(libc, folder, lambda n: n not in store_names)
            dirs += 1
            continue
        for name in store_names:
            p = os.path.join(folder, name)
            if os.path.exists(p):
                libc.mount("/dev/null", p, None, MS_BIND)
                files += 1
    for path in [p for p in store_paths if p.endswith(os.sep)]:
        folder = os.path.realpath(path)
        if os.path.isdir(folder) and folder != "/" and not any(_beneath(p, folder) for p in need):
            _cover(libc, folder, lambda n: False)
            whole += 1
    if not store_paths:
        return "store-hidden (no store)"
    return f"store-hidden ({dirs} folder(s), {files} file(s)" + (f", {whole} covered whole)" if whole else ")")


SOCKET_FOLDERS = ("/run", "/var/run", "/tmp")


def hide_sockets(libc: _Libc, workdir: str) -> str:
    """Cover /run and /tmp (empty, read-only), where root's daemons keep their unix sockets
    (systemd's private bus, D-Bus, docker, containerd, tmux, MPS). The gpu backend's worker must
    be let create unix sockets (the CUDA driver makes one at cuInit), and uid 0 without
    capabilities passes their owner check: what it cannot find it cannot connect to. Abstract
    sockets are another network namespace's (and Landlock scopes them). Entries the worker needs
    (a site-packages under /tmp, its scratch folder) are bound back."""
    need = _needed_paths(workdir)
    done = []
    for folder in SOCKET_FOLDERS:
        if os.path.islink(folder) or not os.path.isdir(folder):
            continue   # /var/run is a link to /run on most systems
        top = {os.path.relpath(p, folder).split("/")[0] for p in need if _beneath(p, folder) and p != folder}
        if any(p == folder for p in need):
            continue
        _cover(libc, folder, lambda n: n in top)
        done.append(folder + (f" (kept: {', '.join(sorted(top))})" if top else ""))
    return "sockets-hidden (" + ", ".join(done) + ")"


DEVICES = ("null", "zero", "full", "random", "urandom")


def minimal_dev(libc: _Libc, workdir: str, backend: str) -> str:
    """Replace /dev by a tmpfs holding only the devices a worker uses: null, zero, full, random,
    urandom, on the gpu backend every /dev/nvidia* node (CUDA opens them; a read-only mount leaves
    device nodes usable), /dev/shm with the worker's scratch folder alone, and the fd links.
    Without this, uid 0 with no capabilities still opens block devices (raw disk writes reach the
    store), /dev/kmsg, /dev/kvm, /dev/fuse, loop devices."""
    staging = os.path.join(workdir, ".dev")
    os.mkdir(staging, 0o755)
    libc.mount("tmpfs", staging, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755")
    nodes = [n for n in DEVICES if os.path.exists(f"/dev/{n}")]
    if backend == "gpu":
        nodes += sorted(n for n in os.listdir("/dev") if n.startswith("nvidia"))
    for n in nodes:
        src, dst = f"/dev/{n}", os.path.join(staging, n)
        if os.path.isdir(src):
            os.mkdir(dst)
        else:
            open(dst, "w").close()
        libc.mount(src, dst, None, MS_BIND | MS_REC)
    for i, n in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{i}", os.path.join(staging, n))
    os.symlink("/proc/self/fd", os.path.join(staging, "fd"))
    os.mkdir(os.path.join(staging, "shm"), 0o755)
    real = os.path.realpath(workdir)
    if real.startswith("/dev/shm/"):
        inner = os.path.join(staging, os.path.relpath(real, "/dev"))
        os.makedirs(inner, 0o700)
        libc.mount(real, inner, None, MS_BIND)
    libc.mount(staging, "/dev", None, MS_MOVE)
    os.rmdir(staging)  # the empty mount point left in the scratch folder
    return f"minimal-dev ({len(nodes)} devices)"


def read_only_mounts(libc: _Libc, workdir: str) -> str:
    """Every mount in this namespace read-only, the scratch folder and the worker's own /proc/<pid>
    (each bound onto itself, so it is a mount of its own) aside: the CUDA driver writes there at
    cuInit (it fails with error 304 otherwise), while /proc/sys, /proc/sysrq-trigger and the rest
    of /proc, which uid 0 could write without any capability, stay read-only.

    mount_setattr(AT_RECURSIVE) sets the flag on each mount, not on the filesystems, so the host's
    mounts stay as they were; kernels before 5.12 remount each mount in /proc/self/mountinfo
    instead. Device nodes stay usable (only files and folders are refused). A uid-0 process without
    capabilities cannot undo a read-only mount."""
    own_proc = os.path.realpath("/proc/self")   # /proc/1: this worker, PID 1 of its namespace
    for path in (workdir, own_proc):
        libc.mount(path, path, None, MS_BIND)
    attr = (ctypes.c_uint64 * 4)(MOUNT_ATTR_RDONLY, 0, 0, 0)
    try:
        libc.syscall(SYS_MOUNT_SETATTR, ctypes.c_int(AT_FDCWD), b"/", ctypes.c_uint(AT_RECURSIVE),
                     ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)))
        how = "mount_setattr"
    except OSError as e:
        if e.errno != errno.ENOSYS:
            raise
        failed = _remount_each_read_only(libc, (workdir, own_proc))
        how = "remount" + (f", {failed} failed" if failed else "")
    clear = (ctypes.c_uint64 * 4)(0, MOUNT_ATTR_RDONLY, 0, 0)
    for path in (workdir, own_proc):
        try:
            libc.syscall(SYS_MOUNT_SETATTR, ctypes.c_int(AT_FDCWD), path.encode(), ctypes.c_uint(0),
                         ctypes.byref(clear), ctypes.c_size_t(ctypes.sizeof(clear)))
        except OSError as e:
            if e.errno != errno.ENOSYS:
                raise
    return f"read-only ({how}; writable: scratch, {own_proc})"


def _remount_each_read_only(libc: _Libc, keep: tuple[str, ...]) -> int:
    flags_of = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC}
    failed = 0
    with open("/proc/self/mountinfo") as f:
        lines = f.read().splitlines()
    for line in lines:
        fields = line.split()
        target = fields[4].encode().decode("unicode_escape")  # \040 for a space, as mountinfo writes it
        if os.path.realpath(target) in {os.path.realpath(k) for k in keep}:
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for opt in fields[5].split(","):
            flags |= flags_of.get(opt, 0)
        try:
            libc.mount(None, target, None, flags)
        except OSError:
            failed += 1
    return failed


def scratch_environment(workdir: str) -> None:
    """Everything that writes files (tempfile, Triton, NVRTC, CUDA's JIT cache, CuPy, inductor,
    anything under $HOME) writes beneath the scratch folder, the only writable place."""
    dirs = {"TMPDIR": "tmp", "HOME": "home", "XDG_CACHE_HOME": "home/.cache", "CUDA_CACHE_PATH": "nv",
            "CUPY_CACHE_DIR": "cupy", "TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton",
            "MKGYM_CUDA_CACHE": "cubin", "TORCH_EXTENSIONS_DIR": "torch_extensions"}
    for var, sub in dirs.items():
        path = os.path.join(workdir, sub)
        os.makedirs(path, exist_ok=True)
        os.environ[var] = path
    import tempfile
    tempfile.tempdir = None  # computed again from TMPDIR


# ---------------------------------------------------------------------------------------
# privileges


def _readable_by_others(path: str) -> bool:
    """Whether a user with no claim on the file (`nobody`) can reach `path`: every folder above it
    searchable by others, and `path` itself readable (a folder also searchable: imports list it)."""
    p = os.path.realpath(path)
    try:
        mode = os.stat(p).st_mode
    except OSError:
        return False
    if not mode & stat.S_IROTH or (stat.S_ISDIR(mode) and not mode & stat.S_IXOTH):
        return False
    while True:
        parent = os.path.dirname(p)
        if parent == p:
            return True
        p = parent
        try:
            if not os.stat(p).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False


def unreadable_import_paths() -> list[str]:
    """What this worker still imports from that `nobody` could not read: every folder on sys.path
    (the interpreter's own standard library and lib-dynload among them: in a venv those sit under
    the base interpreter's prefix, often a pyenv under /root, while torch sits in the venv), torch's
    package and this one. Seen in a venv: `import resource` failed once the worker was `nobody`."""
    import importlib.util as iu
    need = [p for p in sys.path if p and os.path.isdir(p)]
    spec = iu.find_spec("torch")
    if spec is None or not spec.origin:
        return ["torch (not found)"]
    need += [os.path.dirname(spec.origin), os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    return [p for p in dict.fromkeys(need) if not _readable_by_others(p)]


def _become_nobody(workdir: str) -> bool:
    """As root, become `nobody` where everything the worker imports is readable by other users
    (a site-packages under /root usually is not): then also the files uid 0 owns are out of reach.
    Otherwise the worker stays uid 0 with no capabilities, which the other layers confine."""
    if os.geteuid() != 0:
        return False
    import pwd
    if unreadable_import_paths():
        return False
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        return False
    for root, dirs, files in os.walk(workdir):
        for n in dirs + files:
            os.chown(os.path.join(root, n), nobody.pw_uid, nobody.pw_gid, follow_symlinks=False)
    os.chown(workdir, nobody.pw_uid, nobody.pw_gid)
    os.setgroups([])
    os.setgid(nobody.pw_gid)
    os.setuid(nobody.pw_uid)
    return True


def drop_capabilities(libc: _Libc, workdir: str, become_nobody: bool) -> str:
    """No capability left in any set: the bounding set emptied first (so no later execve, of a
    set-uid root binary or as uid 0, can give any back), then `nobody` where possible, then the
    ambient set cleared and the permitted, effective and inheritable sets zeroed with capset.
    What a uid-0 process without capabilities cannot do: mount or unmount, override file
    permissions set for others, trace or signal other users' processes, load modules, raise limits."""
    last = int(open("/proc/sys/kernel/cap_last_cap").read())
    for cap in range(last + 1):
        libc.prctl(24, cap)  # PR_CAPBSET_DROP
    who = "nobody" if become_nobody and _become_nobody(workdir) else f"uid {os.getuid()}"
    libc.prctl(47, 4)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable (two 32-bit words each): none
    libc.check(libc.lib.capset(header, data), "capset")
    status = proc_status()
    left = [k for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb") if int(status.get(k, "0"), 16)]
    if left:
        raise OSError(errno.EPERM, f"capabilities left after the drop: {left}")
    return f"no-caps ({who})"


def no_new_privileges(libc: _Libc) -> str:
    """PR_SET_NO_NEW_PRIVS: execve never grants privileges again (set-uid bits and file
    capabilities are ignored), and an unprivileged process may then load seccomp and Landlock."""
    libc.prctl(38, 1)
    return "no-new-privs"


_ENVIRON: list = []   # the block /proc/self/environ now shows: it must outlive the set-up


def hide_initial_environment(libc: _Libc) -> str:
    """/proc/self/environ shows the environment the process was started with, whatever has been
    deleted from os.environ since (the judge's secrets, MKGYM_STORE): point it at the scrubbed
    environment instead. PR_SET_MM_MAP with every other field as it is (it needs no
    CAP_SYS_RESOURCE, which a container's root may lack; the single-field PR_SET_MM calls do)."""
    block = b"".join(f"{k}={v}".encode() + b"\0" for k, v in os.environ.items()) or b"\0"
    buf = ctypes.create_string_buffer(block, len(block))
    _ENVIRON.append(buf)
    with open("/proc/self/stat") as f:
        stat_ = [0, 0, 0] + f.read().rsplit(")", 1)[1].split()   # stat_[i]: field i of proc(5), from 1
    libc.lib.sbrk.restype = ctypes.c_void_p
    values = [int(stat_[26]), int(stat_[27]), int(stat_[45]), int(stat_[46]), int(stat_[47]),
              libc.lib.sbrk(0), int(stat_[28]), int(stat_[48]), int(stat_[49]),
              ctypes.addressof(buf), ctypes.addressof(buf) + len(block)]
    mm_map = _MmMap(*values, None, 0, 0xFFFFFFFF)   # auxv unchanged, exe_fd -1: the executable unchanged
    libc.prctl(35, 14, ctypes.addressof(mm_map), ctypes.sizeof(mm_map))   # PR_SET_MM, PR_SET_MM_MAP
    return "environ-scrubbed"


class _MmMap(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("start_code", "end_code", "start_data", "end_data", "start_brk",
                                               "brk", "start_stack", "arg_start", "arg_end", "env_start",
                                               "env_end")] + [
        ("auxv", ctypes.c_void_p), ("auxv_size", ctypes.c_uint32), ("exe_fd", ctypes.c_uint32)]


def proc_status() -> dict[str, str]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


# ---------------------------------------------------------------------------------------
# Landlock


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock(libc: _Libc, workdir: str) -> str:
    """A second, independent wall around writes (besides the read-only mounts): files may be
    written, made, removed or truncated beneath the scratch folder alone (and opened for writing
    beneath /dev, CUDA's device nodes, and the worker's own /proc/<pid>, as the mounts allow). From
    Landlock ABI 4 no TCP bind or connect; from ABI 6 no signal to, and no abstract unix socket of,
    any process outside this worker's own. Restricts this thread and every thread and process it
    starts: called before the worker has any other. EXECUTE is not restricted: what an executed
    program could do, the candidate already does in its own process through ctypes, under the same
    filter, capabilities and mounts (it inherits every layer)."""
    abi = libc.syscall(SYS_LANDLOCK_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))  # ENOSYS/EOPNOTSUPP: none
    write = 1 << 1 | 1 << 4 | 1 << 5 | 1 << 6 | 1 << 7 | 1 << 8 | 1 << 9 | 1 << 10 | 1 << 11 | 1 << 12
    write |= (1 << 13 if abi >= 2 else 0) | (1 << 14 if abi >= 3 else 0)  # REFER, TRUNCATE
    attr = _RulesetAttr(write, 0b11 if abi >= 4 else 0, 0b11 if abi >= 6 else 0)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    fd = libc.syscall(SYS_LANDLOCK_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    try:
        files = 1 << 1 | (1 << 14 if abi >= 3 else 0)   # WRITE_FILE, TRUNCATE
        for path, allowed in ((workdir, write), ("/dev", files), ("/proc/self", files)):
            beneath = _PathBeneath(allowed, os.open(path, os.O_PATH | os.O_CLOEXEC))
            try:
                libc.syscall(SYS_LANDLOCK_ADD_RULE, ctypes.c_int(fd), ctypes.c_int(1), ctypes.byref(beneath),
                             ctypes.c_uint32(0))
            finally:
                os.close(beneath.parent_fd)
        libc.syscall(SYS_LANDLOCK_RESTRICT, ctypes.c_int(fd), ctypes.c_uint32(0))
    finally:
        os.close(fd)
    what = ["writes"] + (["tcp"] if abi >= 4 else []) + (["signals", "abstract-unix"] if abi >= 6 else [])
    return f"landlock (abi {abi}: {', '.join(what)})"


# ---------------------------------------------------------------------------------------
# seccomp


def _seccomp():
    import pyseccomp  # a ctypes binding to libseccomp.so.2: raises when the library is missing
    return pyseccomp


def _syscall_number(sc, name: str) -> int | None:
    nr = sc.resolve_syscall(sc.Arch.NATIVE, name)
    return nr if isinstance(nr, int) and nr >= 0 else None


def seccomp_filter() -> str:
    """Deny (EPERM, so the candidate gets a Python error and a clear failure, never a kill) the
    calls no kernel author's code needs: DENIED_SYSCALLS, socket() but for AF_UNIX, and clone with any
    namespace flag. clone3
    answers ENOSYS, so glibc falls back to clone, whose flags a filter can read (clone3's sit in
    memory it cannot). Applied to every thread (TSYNC)."""
    sc = _seccomp()
    f = sc.SyscallFilter(sc.ALLOW)
    f.set_attr(sc.Attr.CTL_TSYNC, 1)
    unknown = []
    for name in DENIED_SYSCALLS:
        nr = _syscall_number(sc, name)
        if nr is None:
            unknown.append(name)
            continue
        f.add_rule(sc.ERRNO(errno.EPERM), nr)
    for flag in NAMESPACE_FLAGS:
        f.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    f.add_rule(sc.ERRNO(errno.EPERM), "socket", sc.Arg(0, sc.NE, AF_UNIX))
    nr = _syscall_number(sc, "clone3")
    if nr is not None:
        f.add_rule(sc.ERRNO(errno.ENOSYS), nr)
    f.load()
    return "seccomp" + (f" (unknown to libseccomp: {', '.join(unknown)})" if unknown else "")


def forbid_new_tasks() -> str:
    """cpu backend, once the worker is set up: no new process, thread or socket, no execve. A
    second filter on top of the first (filters stack; the strictest answer wins)."""
    sc = _seccomp()
    f = sc.SyscallFilter(sc.ALLOW)
    f.set_attr(sc.Attr.CTL_TSYNC, 1)
    for name in CPU_DENIED_AFTER_SETUP:
        nr = _syscall_number(sc, name)
        if nr is not None:
            f.add_rule(sc.ERRNO(errno.EPERM), nr)
    f.load()
    return "seccomp-cpu (no process, thread or socket)"


# ---------------------------------------------------------------------------------------
# the whole set-up


def isolate(role: str, backend: str, workdir: str, store_paths: list[str], judge_pid: int,
            become_nobody: bool = False) -> tuple[list[str], list[str]]:
    """Namespaces, then (inside them, still root) the filesystem view, then the privileges:
    returns (layers on, layers missing with why). Called first thing in the worker, with one
    thread: every thread and process the worker starts later inherits every layer.
    `store_paths` is emptied here: the worker keeps no path to the store once set up."""
    paths = list(store_paths)
    store_paths.clear()
    mode = enter_namespaces(role, judge_pid)
    if mode is None:
        return [], ["namespaces (not root and no user namespaces)"]
    on, missing = [mode], []
    candidate = role == "candidate"

    def layer(name: str, fn, *args) -> None:
        try:
            on.append(fn(*args))
        except (OSError, ImportError, RuntimeError, ValueError) as e:
            missing.append(f"{name} ({type(e).__name__}: {e})")

    libc = _Libc()
    try:
        missing += private_mounts(libc)
    except OSError as e:
        return on, [f"private mounts ({e.strerror}): nothing hidden, nothing read-only"]
    layer("store-hidden", hide_store, libc, paths, workdir)
    paths.clear()
    if candidate:
        layer("sockets-hidden", hide_sockets, libc, workdir)
        layer("minimal-dev", minimal_dev, libc, workdir, backend)
        layer("read-only", read_only_mounts, libc, workdir)
    sys.path[:] = [os.path.abspath(p) if p in ("", ".") else p for p in sys.path]
    try:
        os.chdir(workdir if candidate else os.getcwd())  # a cwd under a cover would reach beneath it
    except OSError:
        os.chdir(workdir)
    if candidate:
        layer("environ-scrubbed", hide_initial_environment, libc)
        layer("no-caps", drop_capabilities, libc, workdir, become_nobody)
    layer("no-new-privs", no_new_privileges, libc)
    if candidate:
        layer("landlock", landlock, libc, workdir)
        layer("seccomp", seccomp_filter)
    _die_with_parent()  # a change of uid clears PR_SET_PDEATHSIG (prctl(2)): armed again
    return on, missing
