//! Sandbox experiment library for the Ferry `exec` tool feasibility study.
//!
//! Everything that allocates (paths, Landlock ruleset, uid_map text) is prepared in the
//! parent by [`Policy::prepare`]. The returned [`Prepared`] is moved into the `pre_exec`
//! closure, which only issues raw syscalls (async-signal-safe: no malloc, no locks), because
//! the parent (a tokio daemon) is multi-threaded and `fork` only copies the calling thread.
//!
//! Order inside the child (see `Prepared::child_setup`):
//!   1. join cgroup (optional, needs the pre-opened `cgroup.procs` fd, before dropping root)
//!   2. drop root: setgroups([]) + setresgid + setresuid (only when running as root)
//!   3. unshare(CLONE_NEWUSER | CLONE_NEWNET [| CLONE_NEWNS] [| CLONE_NEWPID])
//!   4. write uid_map/gid_map (optional, identity map of the sandbox uid)
//!   5. private /tmp bind mount (optional, needs CLONE_NEWNS)
//!   6. setrlimit(...)   -- AFTER the userns unshare so RLIMIT_NPROC is per-sandbox
//!   7. Landlock restrict_self (sets no_new_privs) -- last, it forbids mount() etc.
//!   8. PID namespace: fork once more so the command becomes PID 1 of the new ns (optional)

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope,
};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Raw ABI probe: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION).
/// Returns the ABI version (>0) or -errno (ENOSYS: not built, EOPNOTSUPP: disabled at boot).
pub fn landlock_abi_raw() -> i64 {
    let r = unsafe {
        libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<u8>(), 0usize, 1u32)
    };
    if r < 0 { -(io::Error::last_os_error().raw_os_error().unwrap_or(0) as i64) } else { r }
}

/// LANDLOCK_CREATE_RULESET_ERRATA (1 << 1), Linux >= 6.15: bitmask of fixed errata.
pub fn landlock_errata_raw() -> i64 {
    let r = unsafe {
        libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<u8>(), 0usize, 2u32)
    };
    if r < 0 { -(io::Error::last_os_error().raw_os_error().unwrap_or(0) as i64) } else { r }
}

#[derive(Clone, Debug)]
pub struct Limits {
    pub cpu_secs: Option<u64>,
    pub as_bytes: Option<u64>,
    pub data_bytes: Option<u64>,
    pub nproc: Option<u64>,
    pub fsize_bytes: Option<u64>,
    pub nofile: Option<u64>,
}

impl Limits {
    pub fn none() -> Self {
        Limits { cpu_secs: None, as_bytes: None, data_bytes: None, nproc: None, fsize_bytes: None, nofile: None }
    }
    pub fn default_exec() -> Self {
        Limits {
            cpu_secs: Some(60),
            as_bytes: None,
            data_bytes: Some(1 << 30),
            nproc: Some(64),
            fsize_bytes: Some(1 << 30),
            nofile: Some(1024),
        }
    }
    fn to_vec(&self) -> Vec<(libc::__rlimit_resource_t, libc::rlimit)> {
        let mut v = Vec::new();
        let mut push = |res, val: Option<u64>, extra: u64| {
            if let Some(x) = val {
                v.push((res, libc::rlimit { rlim_cur: x, rlim_max: x + extra }));
            }
        };
        // CPU: soft -> SIGXCPU, hard one second later -> SIGKILL
        push(libc::RLIMIT_CPU, self.cpu_secs, 1);
        push(libc::RLIMIT_AS, self.as_bytes, 0);
        push(libc::RLIMIT_DATA, self.data_bytes, 0);
        push(libc::RLIMIT_NPROC, self.nproc, 0);
        push(libc::RLIMIT_FSIZE, self.fsize_bytes, 0);
        push(libc::RLIMIT_NOFILE, self.nofile, 0);
        v.push((libc::RLIMIT_CORE, libc::rlimit { rlim_cur: 0, rlim_max: 0 }));
        v
    }
}

#[derive(Clone, Debug)]
pub struct Policy {
    /// Apply Landlock filesystem rules.
    pub landlock: bool,
    /// Full access (workspace, private tmp).
    pub rw: Vec<PathBuf>,
    /// Read + execute (system dirs). Expanded around `deny`.
    pub ro: Vec<PathBuf>,
    /// Read + write, files only (/dev/null, ...).
    pub dev_rw: Vec<PathBuf>,
    /// Paths that must stay unreachable; `ro`/`rw` roots containing them are expanded.
    pub deny: Vec<PathBuf>,
    /// Landlock ABI>=4: deny all TCP connect/bind (no rules => nothing allowed).
    pub landlock_deny_tcp: bool,
    /// Landlock ABI>=6: scope signals + abstract unix sockets to the sandbox.
    pub landlock_scopes: bool,
    pub userns: bool,
    pub netns: bool,
    pub pidns: bool,
    /// Identity-map the sandbox uid/gid inside the user namespace.
    pub map_ids: bool,
    /// Bind this dir over /tmp in a private mount namespace (implies CLONE_NEWNS).
    pub private_tmp: Option<PathBuf>,
    pub limits: Limits,
    /// When running as root: drop to this uid/gid before anything else.
    pub run_as: Option<(u32, u32)>,
    /// cgroup.procs file to join (cgroup v1 or v2).
    pub cgroup_procs: Option<PathBuf>,
    /// Set RLIMITs *before* unshare (to demonstrate the ordering effect on NPROC).
    pub rlimits_before_unshare: bool,
}

impl Policy {
    pub fn empty() -> Self {
        Policy {
            landlock: false,
            rw: vec![],
            ro: vec![],
            dev_rw: vec![],
            deny: vec![],
            landlock_deny_tcp: false,
            landlock_scopes: false,
            userns: false,
            netns: false,
            pidns: false,
            map_ids: false,
            private_tmp: None,
            limits: Limits::none(),
            run_as: None,
            cgroup_procs: None,
            rlimits_before_unshare: false,
        }
    }

    /// The "recommended" policy for Ferry.
    pub fn recommended(workspace: &Path, tmp: &Path, extra_ro: &[PathBuf], deny: &[PathBuf]) -> Self {
        let mut ro: Vec<PathBuf> =
            ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/proc"].iter().map(PathBuf::from).collect();
        ro.extend(extra_ro.iter().cloned());
        Policy {
            landlock: true,
            rw: vec![workspace.to_path_buf(), tmp.to_path_buf()],
            ro,
            dev_rw: ["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"]
                .iter()
                .map(PathBuf::from)
                .collect(),
            deny: deny.to_vec(),
            landlock_deny_tcp: false,
            landlock_scopes: true,
            userns: true,
            netns: true,
            pidns: false,
            map_ids: false,
            private_tmp: None,
            limits: Limits::default_exec(),
            run_as: if unsafe { libc::geteuid() } == 0 { Some((65534, 65534)) } else { None },
            cgroup_procs: None,
            rlimits_before_unshare: false,
        }
    }

    /// Build the Landlock ruleset and everything else the child needs. Allocates; call in
    /// the parent before spawning.
    pub fn prepare(&self) -> io::Result<Prepared> {
        let ruleset = if self.landlock || self.landlock_deny_tcp || self.landlock_scopes {
            Some(self.build_ruleset().map_err(|e| io::Error::other(format!("landlock: {e}")))?)
        } else {
            None
        };
        let mut unshare_flags = 0;
        if self.userns {
            unshare_flags |= libc::CLONE_NEWUSER;
        }
        if self.netns {
            unshare_flags |= libc::CLONE_NEWNET;
        }
        if self.pidns {
            unshare_flags |= libc::CLONE_NEWPID;
        }
        if self.private_tmp.is_some() {
            unshare_flags |= libc::CLONE_NEWNS;
        }
        let (uid, gid) = match self.run_as {
            Some(ids) if unsafe { libc::geteuid() } == 0 => (Some(ids.0), Some(ids.1)),
            _ => (None, None),
        };
        let map = if self.map_ids && self.userns {
            let u = uid.unwrap_or_else(|| unsafe { libc::geteuid() });
            let g = gid.unwrap_or_else(|| unsafe { libc::getegid() });
            Some((format!("{u} {u} 1\n").into_bytes(), format!("{g} {g} 1\n").into_bytes()))
        } else {
            None
        };
        let cgroup_fd = match &self.cgroup_procs {
            Some(p) => Some(OwnedFd::from(std::fs::OpenOptions::new().write(true).open(p)?)),
            None => None,
        };
        let private_tmp = match &self.private_tmp {
            Some(p) => Some(CString::new(p.as_os_str().as_bytes())?),
            None => None,
        };
        Ok(Prepared {
            ruleset,
            unshare_flags,
            rlimits: self.limits.to_vec(),
            uid,
            gid,
            map,
            cgroup_fd,
            private_tmp,
            pidns: self.pidns,
            rlimits_before_unshare: self.rlimits_before_unshare,
            // SBX_NO_DUMPABLE_FIX=1 demonstrates the uid_map EACCES gotcha.
            dumpable_fix: std::env::var_os("SBX_NO_DUMPABLE_FIX").is_none(),
        })
    }

    /// All allowed roots after expanding around deny paths: (path, access).
    pub fn fs_rules(&self, abi: ABI) -> io::Result<Vec<(PathBuf, landlock::BitFlags<AccessFs>)>> {
        let deny: Vec<PathBuf> = self.deny.iter().map(|d| absolutize(d)).collect();
        let mut out = vec![];
        for r in &self.rw {
            // Explicit grants (the session workspace/tmp) may live *inside* a denied dir, e.g.
            // Ferry's default workspace is <state_dir>/workspace: grant them, but still expand
            // around any deny path beneath them.
            let outer: Vec<PathBuf> = deny.iter().filter(|d| !absolutize(r).starts_with(d)).cloned().collect();
            for p in expand_allow(r, &outer)? {
                out.push((p, AccessFs::from_all(abi)));
            }
        }
        for r in &self.ro {
            for p in expand_allow(r, &deny)? {
                out.push((p, AccessFs::from_read(abi)));
            }
        }
        for r in &self.dev_rw {
            if r.exists() {
                out.push((r.clone(), AccessFs::ReadFile | AccessFs::WriteFile));
            }
        }
        // Self-check: no allowed path may be a deny path or an ancestor of one.
        for (p, _) in &out {
            let cp = p.canonicalize().unwrap_or(p.clone());
            for d in &deny {
                if d.starts_with(&cp) {
                    return Err(io::Error::other(format!("allowed {} covers denied {}", cp.display(), d.display())));
                }
            }
        }
        Ok(out)
    }

    fn build_ruleset(&self) -> Result<RulesetCreated, Box<dyn std::error::Error>> {
        // Hard requirement: ABI v3 filesystem rights (v3 adds Truncate; without it truncate(2)
        // is uncontrolled). Everything newer is best-effort.
        let mut rs = Ruleset::default();
        if self.landlock {
            rs = rs
                .set_compatibility(CompatLevel::HardRequirement)
                .handle_access(AccessFs::from_all(ABI::V3))?
                .set_compatibility(CompatLevel::BestEffort)
                .handle_access(AccessFs::from_all(ABI::V6))?;
        }
        if self.landlock_deny_tcp {
            rs = rs
                .set_compatibility(CompatLevel::HardRequirement)
                .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
        }
        if self.landlock_scopes {
            rs = rs.set_compatibility(CompatLevel::BestEffort).scope(Scope::from_all(ABI::V6))?;
        }
        let mut created = rs.create()?;
        if self.landlock {
            for (p, access) in self.fs_rules(ABI::V6)? {
                let fd = match PathFd::new(&p) {
                    Ok(fd) => fd,
                    Err(_) => continue, // vanished: fail closed (less access)
                };
                let access = if std::fs::metadata(&p).map(|m| m.is_dir()).unwrap_or(false) {
                    access
                } else {
                    access & AccessFs::from_file(ABI::V6)
                };
                created = created.add_rule(PathBeneath::new(fd, access))?;
            }
        }
        Ok(created)
    }
}

fn absolutize(p: &Path) -> PathBuf {
    // Canonicalize existing paths; keep non-existent ones lexically (they may be created later).
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}

/// Return the set of paths under `root` that can be granted without granting anything in
/// `deny`. Symlinks inside an expanded dir are skipped (Landlock's PathFd follows symlinks,
/// so granting a symlink would grant its *target*).
pub fn expand_allow(root: &Path, deny: &[PathBuf]) -> io::Result<Vec<PathBuf>> {
    let root = match root.canonicalize() {
        Ok(r) => r,
        Err(_) => return Ok(vec![]),
    };
    if deny.iter().any(|d| root.starts_with(d)) {
        return Ok(vec![]);
    }
    if !deny.iter().any(|d| d.starts_with(&root)) {
        return Ok(vec![root]);
    }
    let mut out = vec![];
    for e in std::fs::read_dir(&root)? {
        let p = e?.path();
        let ft = std::fs::symlink_metadata(&p)?.file_type();
        if deny.iter().any(|d| *d == p) {
            continue;
        }
        if deny.iter().any(|d| d.starts_with(&p)) {
            if ft.is_dir() {
                out.extend(expand_allow(&p, deny)?);
            }
        } else if !ft.is_symlink() {
            out.push(p);
        }
    }
    Ok(out)
}

/// State moved into the `pre_exec` closure. Only raw syscalls are used on it in the child.
pub struct Prepared {
    ruleset: Option<RulesetCreated>,
    unshare_flags: libc::c_int,
    rlimits: Vec<(libc::__rlimit_resource_t, libc::rlimit)>,
    uid: Option<u32>,
    gid: Option<u32>,
    map: Option<(Vec<u8>, Vec<u8>)>,
    cgroup_fd: Option<OwnedFd>,
    private_tmp: Option<CString>,
    pidns: bool,
    rlimits_before_unshare: bool,
    dumpable_fix: bool,
}

fn ewrite(msg: &[u8]) {
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
    }
}

fn fail(step: &'static [u8]) -> io::Error {
    let e = io::Error::last_os_error();
    ewrite(b"sandbox setup failed at: ");
    ewrite(step);
    ewrite(b"\n");
    e
}

fn write_file(path: &std::ffi::CStr, data: &[u8]) -> bool {
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        libc::close(fd);
        n == data.len() as isize
    }
}

impl Prepared {
    fn set_rlimits(&self) -> io::Result<()> {
        for (res, lim) in &self.rlimits {
            if unsafe { libc::setrlimit(*res, lim) } != 0 {
                return Err(fail(b"setrlimit"));
            }
        }
        Ok(())
    }

    /// Runs in the forked child. Async-signal-safe: raw syscalls only.
    pub fn child_setup(&mut self) -> io::Result<()> {
        unsafe {
            if let Some(fd) = &self.cgroup_fd {
                if libc::write(fd.as_raw_fd(), b"0".as_ptr().cast(), 1) != 1 {
                    return Err(fail(b"cgroup join"));
                }
            }
            if let (Some(uid), Some(gid)) = (self.uid, self.gid) {
                if libc::setgroups(0, std::ptr::null()) != 0 {
                    return Err(fail(b"setgroups"));
                }
                if libc::setresgid(gid, gid, gid) != 0 {
                    return Err(fail(b"setresgid"));
                }
                if libc::setresuid(uid, uid, uid) != 0 {
                    return Err(fail(b"setresuid"));
                }
            }
            if self.rlimits_before_unshare {
                self.set_rlimits()?;
            }
            if self.unshare_flags != 0 && libc::unshare(self.unshare_flags) != 0 {
                return Err(fail(b"unshare"));
            }
            if let Some((u, g)) = &self.map {
                // After setresuid() the task is non-dumpable, which makes /proc/self/* owned
                // by root and uid_map unwritable: restore dumpable first (exec resets it anyway).
                if self.uid.is_some() && self.dumpable_fix {
                    libc::prctl(libc::PR_SET_DUMPABLE, 1 as libc::c_ulong, 0, 0, 0);
                }
                if !write_file(c"/proc/self/setgroups", b"deny")
                    || !write_file(c"/proc/self/uid_map", u)
                    || !write_file(c"/proc/self/gid_map", g)
                {
                    return Err(fail(b"uid_map"));
                }
            }
            if let Some(tmp) = &self.private_tmp {
                if libc::mount(c"none".as_ptr(), c"/".as_ptr(), std::ptr::null(), libc::MS_REC | libc::MS_PRIVATE, std::ptr::null()) != 0 {
                    return Err(fail(b"mount private"));
                }
                if libc::mount(tmp.as_ptr(), c"/tmp".as_ptr(), std::ptr::null(), libc::MS_BIND | libc::MS_REC, std::ptr::null()) != 0 {
                    return Err(fail(b"bind /tmp"));
                }
            }
            if !self.rlimits_before_unshare {
                self.set_rlimits()?;
            }
            if let Some(rs) = self.ruleset.take() {
                match rs.restrict_self() {
                    Ok(st) if st.ruleset != RulesetStatus::NotEnforced => {}
                    Ok(_) => {
                        ewrite(b"sandbox setup failed at: landlock not enforced\n");
                        return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
                    }
                    Err(_) => return Err(fail(b"landlock restrict_self")),
                }
            }
            if self.pidns {
                // unshare(CLONE_NEWPID) only affects children: fork once so the command is
                // PID 1 of the new namespace; when it exits the kernel kills the whole ns.
                let pid = libc::fork();
                if pid < 0 {
                    return Err(fail(b"pidns fork"));
                }
                if pid > 0 {
                    // Intermediate: wait and mirror the exit status, never return to std.
                    let mut status = 0;
                    loop {
                        let r = libc::waitpid(pid, &mut status, 0);
                        if r == pid || (r < 0 && *libc::__errno_location() != libc::EINTR) {
                            break;
                        }
                    }
                    if libc::WIFEXITED(status) {
                        libc::_exit(libc::WEXITSTATUS(status));
                    }
                    libc::_exit(128 + libc::WTERMSIG(status));
                }
                // ns init: die if the intermediate dies (e.g. Ferry SIGKILLs it on timeout).
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
            }
        }
        Ok(())
    }

    /// Install on a std Command.
    pub fn install_std(mut self, cmd: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        unsafe {
            cmd.pre_exec(move || self.child_setup());
        }
    }

    /// Install on a tokio Command.
    pub fn install_tokio(mut self, cmd: &mut tokio::process::Command) {
        unsafe {
            cmd.pre_exec(move || self.child_setup());
        }
    }
}

/// Minimal scrubbed environment.
pub fn scrub_env(cmd: &mut std::process::Command, home: &Path, tmp: &Path) {
    cmd.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", home)
        .env("TMPDIR", tmp)
        .env("LANG", "C.UTF-8");
}

pub fn errno_name(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EACCES) => "EACCES".into(),
        Some(libc::EPERM) => "EPERM".into(),
        Some(libc::ENETUNREACH) => "ENETUNREACH".into(),
        Some(libc::ECONNREFUSED) => "ECONNREFUSED".into(),
        Some(libc::EAGAIN) => "EAGAIN".into(),
        Some(libc::EINVAL) => "EINVAL".into(),
        Some(libc::ENOENT) => "ENOENT".into(),
        Some(libc::EFBIG) => "EFBIG".into(),
        Some(libc::ENOMEM) => "ENOMEM".into(),
        Some(n) => format!("errno {n}"),
        None => e.to_string(),
    }
}
