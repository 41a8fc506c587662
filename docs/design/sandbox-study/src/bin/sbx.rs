//! Feasibility experiments. Run `sbx help`.
use sbx::*;
use landlock::{Access, RulesetAttr};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn study_dir() -> PathBuf {
    std::env::var_os("SBX_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/work/sandbox-study/run"))
}

fn exe_dir() -> PathBuf {
    std::env::current_exe().unwrap().parent().unwrap().to_path_buf()
}

struct Dirs {
    ws: PathBuf,
    tmp: PathBuf,
    b: PathBuf,
    fake_etc: PathBuf,
    other_ws: PathBuf,
}

fn setup_dirs() -> Dirs {
    let root = study_dir();
    let d = Dirs {
        ws: root.join("ws"),
        tmp: root.join("tmp"),
        b: root.join("B"),
        fake_etc: root.join("fake_etc"),
        other_ws: root.join("other_ws"),
    };
    for p in [&root, &d.ws, &d.tmp, &d.b, &d.fake_etc, &d.fake_etc.join("ferry"), &d.other_ws] {
        std::fs::create_dir_all(p).unwrap();
    }
    std::fs::write(d.b.join("secret"), "B-SECRET\n").unwrap();
    std::fs::write(d.fake_etc.join("passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
    std::fs::write(d.fake_etc.join("ferry/config.toml"), "token = \"FERRY-SECRET\"\n").unwrap();
    std::fs::write(d.other_ws.join("notes"), "OTHER-SESSION\n").unwrap();
    // workspace + tmp must be writable by the sandbox uid when we drop root
    for p in [&root, &d.ws, &d.tmp, &d.b, &d.fake_etc, &d.other_ws] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    for p in [&d.ws, &d.tmp] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    d
}

fn base_policy(d: &Dirs) -> Policy {
    let mut p = Policy::recommended(
        &d.ws,
        &d.tmp,
        &[exe_dir(), d.fake_etc.clone()],
        &[d.fake_etc.join("ferry"), d.b.clone(), d.other_ws.clone(), PathBuf::from("/root/.ssh")],
    );
    p.run_as = None;
    p.userns = false;
    p.netns = false;
    p.landlock_scopes = false;
    p.limits = Limits::none();
    p
}

fn run_sandboxed(pol: &Policy, d: &Dirs, argv: &[&str]) -> (String, Option<i32>) {
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..]);
    scrub_env(&mut cmd, &d.ws, &d.tmp);
    cmd.current_dir(&d.ws).stdin(Stdio::null());
    let prep = match pol.prepare() {
        Ok(p) => p,
        Err(e) => return (format!("prepare failed: {e}"), None),
    };
    prep.install_std(&mut cmd);
    match cmd.output() {
        Ok(o) => {
            let mut s = String::from_utf8_lossy(&o.stdout).to_string();
            s.push_str(&String::from_utf8_lossy(&o.stderr));
            (s, o.status.code())
        }
        Err(e) => (format!("spawn failed: {e} ({})", errno_name(&e)), None),
    }
}

fn sh_check(name: &str, cmd: &str) -> String {
    format!("if {cmd} >/dev/null 2>/tmp/.e 2>&1; then echo \"  {name}: ALLOWED\"; else echo \"  {name}: denied\"; fi; ")
}

fn fs_script(d: &Dirs) -> String {
    let ws = d.ws.display();
    let b = d.b.display();
    let fe = d.fake_etc.display();
    let ow = d.other_ws.display();
    let root = study_dir();
    let r = root.display();
    // use 2>/dev/null since /tmp is not writable; the sh_check helper's stderr file goes to TMPDIR
    let mut s = String::new();
    let chk = |name: &str, c: &str| {
        format!("if ( {c} ) >/dev/null 2>&1; then echo \"  {name}: ALLOWED\"; else echo \"  {name}: denied\"; fi; ")
    };
    let _ = sh_check;
    s += "echo \"  id: $(id -u):$(id -g)\"; ";
    s += &chk("write workspace A", &format!("echo x > {ws}/f && cat {ws}/f"));
    s += &chk("mkdir+rm in workspace", &format!("mkdir -p {ws}/d/e && rm -r {ws}/d"));
    s += &chk("write $TMPDIR (mktemp)", "f=$(mktemp) && echo y > $f && rm $f");
    s += &chk("read /usr (ls /usr/bin)", "ls /usr/bin");
    s += &chk("read /etc/hostname", "cat /etc/hostname");
    s += &chk("exec /usr/bin/env", "/usr/bin/env true");
    s += &chk("read dir B file", &format!("cat {b}/secret"));
    s += &chk("list dir B", &format!("ls {b}"));
    s += &chk("truncate B file", &format!("truncate -s 0 {b}/secret"));
    s += &chk("hardlink B file into A", &format!("ln {b}/secret {ws}/link"));
    s += &chk("rename A file into B", &format!("mv {ws}/f {b}/f"));
    s += &chk("write outside A (study dir)", &format!("echo x > {r}/outside"));
    s += &chk("write /tmp directly", "echo x > /tmp/sbx-probe-$$");
    s += &chk("write /usr/local", "echo x > /usr/local/sbx-probe");
    s += &chk("read other session ws", &format!("cat {ow}/notes"));
    s += &chk("read fake_etc/passwd", &format!("cat {fe}/passwd"));
    s += &chk("read fake_etc/ferry/config.toml", &format!("cat {fe}/ferry/config.toml"));
    s += &chk("list fake_etc (expanded dir)", &format!("ls {fe}"));
    s += &chk("list /root/.ssh", "ls /root/.ssh");
    s += &chk("read /root (home)", "ls /root");
    s += &chk("write /dev/null", "echo x > /dev/null");
    s += &chk("read /proc/self/status", "cat /proc/self/status");
    s += &chk("write /proc/sys/kernel/hostname (as root)", "cat /proc/sys/kernel/hostname > /proc/sys/kernel/hostname");
    s
}

fn clean_ws(d: &Dirs) {
    for f in ["f", "link"] {
        let _ = std::fs::remove_file(d.ws.join(f));
    }
}

fn cmd_fs_demo() {
    let d = setup_dirs();
    let script = fs_script(&d);
    for (label, setuid) in [("landlock as root (uid 0)", false), ("landlock + drop to uid 65534", true)] {
        let mut pol = base_policy(&d);
        if setuid {
            pol.run_as = Some((65534, 65534));
        }
        println!("== {label}");
        clean_ws(&d);
        let (out, code) = run_sandboxed(&pol, &d, &["/bin/sh", "-c", &script]);
        print!("{out}");
        println!("  exit={code:?}");
    }
    clean_ws(&d);
    println!("== workspace INSIDE a denied state dir (Ferry default: <state_dir>/workspace), uid 65534");
    {
        // state dir = study_dir(); it holds B/, other_ws/, fake_etc/ and the workspace ws/
        let mut pol = base_policy(&d);
        pol.run_as = Some((65534, 65534));
        pol.deny.push(study_dir());
        let c = format!(
            "echo x > {ws}/f && echo '  write own workspace: ALLOWED' || echo '  write own workspace: denied'; \
             cat {ow}/notes >/dev/null 2>&1 && echo '  read other session ws: ALLOWED' || echo '  read other session ws: denied'; \
             ls {sd} >/dev/null 2>&1 && echo '  list state dir: ALLOWED' || echo '  list state dir: denied'",
            ws = d.ws.display(), ow = d.other_ws.display(), sd = study_dir().display()
        );
        clean_ws(&d);
        let (out, _) = run_sandboxed(&pol, &d, &["/bin/sh", "-c", &c]);
        print!("{out}");
        clean_ws(&d);
    }
    println!("== NO sandbox (control)");
    let pol = Policy::empty();
    let (out, _) = run_sandboxed(&pol, &d, &["/bin/sh", "-c", &script]);
    print!("{out}");
    // undo what the unsandboxed control run managed to do
    let _ = std::fs::remove_file("/usr/local/sbx-probe");
    let _ = std::fs::remove_file(study_dir().join("outside"));
    let _ = std::fs::remove_file(d.b.join("f"));
    std::fs::write(d.b.join("secret"), "B-SECRET\n").unwrap();
    for e in std::fs::read_dir("/tmp").unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with("sbx-probe-") {
            let _ = std::fs::remove_file(e.path());
        }
    }
    clean_ws(&d);
    println!("== fs rules actually added (ro/rw after deny expansion):");
    for (p, a) in base_policy(&d).fs_rules(landlock::ABI::V6).unwrap() {
        println!("  {} {:?}", p.display(), a.iter().count());
    }
}

fn cmd_abi() {
    println!("landlock_create_ruleset(VERSION) = {}", landlock_abi_raw());
    println!("landlock_create_ruleset(ERRATA)  = {}", landlock_errata_raw());
    // crate view: restrict a forked child and report status
    let mut pol = Policy::empty();
    pol.landlock = true;
    pol.landlock_deny_tcp = true;
    pol.landlock_scopes = true;
    pol.ro = vec!["/".into()];
    match pol.prepare() {
        Ok(_) => println!("crate: ruleset with FS(V3 hard, V6 best-effort) + TCP(hard) + scopes created OK"),
        Err(e) => println!("crate: prepare failed: {e}"),
    }
    let rs = landlock::Ruleset::default()
        .handle_access(landlock::AccessFs::from_all(landlock::ABI::V10))
        .unwrap()
        .create()
        .unwrap();
    match unsafe { libc::fork() } {
        0 => {
            let st = rs.restrict_self().unwrap();
            println!("crate (child, best-effort ABI::V10 request): ruleset={:?} landlock={:?} nnp={}", st.ruleset, st.landlock, st.no_new_privs);
            std::io::stdout().flush().unwrap();
            unsafe { libc::_exit(0) };
        }
        pid => unsafe {
            let mut s = 0;
            libc::waitpid(pid, &mut s, 0);
        },
    }
}

fn helper_bin() -> String {
    std::env::current_exe().unwrap().display().to_string()
}

fn cmd_net_demo() {
    let d = setup_dirs();
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let tport = tcp.local_addr().unwrap().port();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let uport = udp.local_addr().unwrap().port();
    let sock_path = d.b.join("ferry.sock");
    let _ = std::fs::remove_file(&sock_path);
    let unix = std::os::unix::net::UnixListener::bind(&sock_path).unwrap();
    unix.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        for s in tcp.incoming() {
            drop(s);
        }
    });
    let me = std::process::id().to_string();
    let h = helper_bin();
    let script = format!(
        "echo \"  tcp 127.0.0.1:{tport}: $({h} helper tcp 127.0.0.1:{tport})\"; \
         echo \"  udp 127.0.0.1:{uport}: $({h} helper udp 127.0.0.1:{uport})\"; \
         echo \"  unix {sp} (in denied dir): $({h} helper unix {sp})\"; \
         echo \"  lo up + tcp again: $({h} helper lo-up-tcp 127.0.0.1:{tport})\"; \
         echo \"  kill(parent {me}, 0): $({h} helper kill {me})\"; \
         echo \"  raise RLIMIT_NPROC hard limit: $({h} helper raise-nproc)\"; ",
        sp = sock_path.display()
    );
    let variants: Vec<(&str, Box<dyn Fn(&mut Policy)>)> = vec![
        ("no sandbox (control)", Box::new(|p: &mut Policy| *p = Policy::empty())),
        ("root + unshare(NEWNET)", Box::new(|p: &mut Policy| { *p = Policy::empty(); p.netns = true; })),
        ("root + unshare(NEWUSER|NEWNET)", Box::new(|p: &mut Policy| { *p = Policy::empty(); p.netns = true; p.userns = true; })),
        ("root + landlock FS + TCP deny (ABI4), no netns", Box::new(|p: &mut Policy| { p.landlock_deny_tcp = true; })),
        ("root + landlock FS + scopes (ABI6), no netns", Box::new(|p: &mut Policy| { p.landlock_scopes = true; })),
        ("RECOMMENDED: uid 65534 + NEWUSER|NEWNET + landlock FS+scopes + rlimits", Box::new(|p: &mut Policy| {
            p.run_as = Some((65534, 65534)); p.userns = true; p.netns = true; p.landlock_scopes = true; p.limits = Limits::default_exec();
        })),
    ];
    for (label, f) in variants {
        let mut pol = base_policy(&d);
        f(&mut pol);
        println!("== {label}");
        let (out, code) = run_sandboxed(&pol, &d, &["/bin/sh", "-c", &script]);
        print!("{out}");
        if code != Some(0) {
            println!("  exit={code:?}");
        }
        let mut buf = [0u8; 64];
        match udp.recv_from(&mut buf) {
            Ok((n, _)) => println!("  (parent received {n} UDP bytes)"),
            Err(_) => println!("  (parent received no UDP datagram)"),
        }
        match unix.accept() {
            Ok(_) => println!("  (parent accepted a unix connection)"),
            Err(_) => {}
        }
    }
}

fn parse_size(s: &str) -> u64 {
    let (n, m) = match s.chars().last().unwrap() {
        'K' | 'k' => (&s[..s.len() - 1], 1u64 << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        'G' | 'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    n.parse::<u64>().unwrap() * m
}

/// Generic runner: sbx run [flags] -- cmd args...
fn cmd_run(args: &[String]) {
    let d = setup_dirs();
    let mut pol = base_policy(&d);
    pol.landlock = false;
    let mut i = 0;
    let mut time = false;
    while i < args.len() {
        let a = args[i].as_str();
        let mut next = || {
            i += 1;
            args[i].clone()
        };
        match a {
            "--landlock" => pol.landlock = true,
            "--scopes" => pol.landlock_scopes = true,
            "--deny-tcp" => pol.landlock_deny_tcp = true,
            "--userns" => pol.userns = true,
            "--netns" => pol.netns = true,
            "--pidns" => pol.pidns = true,
            "--map-ids" => pol.map_ids = true,
            "--private-tmp" => pol.private_tmp = Some(d.tmp.clone()),
            "--uid" => {
                let u: u32 = next().parse().unwrap();
                pol.run_as = Some((u, u));
            }
            "--nproc" => pol.limits.nproc = Some(next().parse().unwrap()),
            "--as" => pol.limits.as_bytes = Some(parse_size(&next())),
            "--data" => pol.limits.data_bytes = Some(parse_size(&next())),
            "--fsize" => pol.limits.fsize_bytes = Some(parse_size(&next())),
            "--cpu" => pol.limits.cpu_secs = Some(next().parse().unwrap()),
            "--cgroup" => pol.cgroup_procs = Some(PathBuf::from(next())),
            "--rlimits-first" => pol.rlimits_before_unshare = true,
            "--recommended" => {
                pol = Policy::recommended(&d.ws, &d.tmp, &[exe_dir()], &[d.b.clone(), d.other_ws.clone()]);
            }
            "--time" => time = true,
            "--" => {
                i += 1;
                break;
            }
            other => panic!("unknown flag {other}"),
        }
        i += 1;
    }
    let argv: Vec<&str> = args[i..].iter().map(|s| s.as_str()).collect();
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..]);
    scrub_env(&mut cmd, &d.ws, &d.tmp);
    cmd.current_dir(&d.ws).stdin(Stdio::null());
    pol.prepare().expect("prepare").install_std(&mut cmd);
    let t = Instant::now();
    match cmd.status() {
        Ok(st) => {
            use std::os::unix::process::ExitStatusExt;
            eprintln!("[sbx run] exit code={:?} signal={:?}{}", st.code(), st.signal(),
                if time { format!(" elapsed={:?}", t.elapsed()) } else { String::new() });
            std::process::exit(st.code().unwrap_or(128 + st.signal().unwrap_or(0)));
        }
        Err(e) => {
            eprintln!("[sbx run] spawn failed: {e} ({})", errno_name(&e));
            std::process::exit(125);
        }
    }
}

// ---------------------------------------------------------------- helper (runs inside sandbox)
fn helper(args: &[String]) {
    let what = args[0].as_str();
    match what {
        "tcp" => match std::net::TcpStream::connect_timeout(&args[1].parse().unwrap(), Duration::from_secs(1)) {
            Ok(_) => println!("CONNECTED"),
            Err(e) => println!("{}", errno_name(&e)),
        },
        "lo-up-tcp" => {
            let r = lo_up();
            let c = match std::net::TcpStream::connect_timeout(&args[1].parse().unwrap(), Duration::from_secs(1)) {
                Ok(_) => "CONNECTED".to_string(),
                Err(e) => errno_name(&e),
            };
            println!("lo-up={r} tcp={c}");
        }
        "udp" => {
            let s = match std::net::UdpSocket::bind("0.0.0.0:0") {
                Ok(s) => s,
                Err(e) => return println!("bind {}", errno_name(&e)),
            };
            match s.send_to(b"hello", &args[1]) {
                Ok(_) => println!("SENT"),
                Err(e) => println!("{}", errno_name(&e)),
            }
        }
        "unix" => match std::os::unix::net::UnixStream::connect(&args[1]) {
            Ok(_) => println!("CONNECTED"),
            Err(e) => println!("{}", errno_name(&e)),
        },
        "kill" => {
            let pid: i32 = args[1].parse().unwrap();
            if unsafe { libc::kill(pid, 0) } == 0 {
                println!("ALLOWED (could SIGKILL the daemon)")
            } else {
                println!("{}", errno_name(&std::io::Error::last_os_error()))
            }
        }
        "raise-nproc" => {
            let l = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
            if unsafe { libc::setrlimit(libc::RLIMIT_NPROC, &l) } == 0 {
                println!("ALLOWED (rlimits are meaningless)")
            } else {
                println!("{}", errno_name(&std::io::Error::last_os_error()))
            }
        }
        "forks" => {
            // Bounded: try to create N sleeping children, report how many succeeded.
            let n: usize = args[1].parse().unwrap();
            let mut kids = vec![];
            let mut err = String::from("-");
            for _ in 0..n {
                match unsafe { libc::fork() } {
                    0 => unsafe {
                        libc::sleep(30);
                        libc::_exit(0);
                    },
                    -1 => {
                        err = errno_name(&std::io::Error::last_os_error());
                        break;
                    }
                    pid => kids.push(pid),
                }
            }
            println!("forked {}/{} (first error: {err})", kids.len(), n);
            if let Some(hold) = args.get(2) {
                std::thread::sleep(Duration::from_millis(hold.parse().unwrap()));
            }
            for k in &kids {
                unsafe { libc::kill(*k, libc::SIGKILL) };
            }
            for k in &kids {
                unsafe { libc::waitpid(*k, std::ptr::null_mut(), 0) };
            }
        }
        "ids" => unsafe {
            println!("uid={} euid={} gid={}", libc::getuid(), libc::geteuid(), libc::getgid());
        },
        "exec-full" => {
            // exec-full WS TMP -- CMD ARGS...: single-threaded helper applies the sandbox to
            // itself (allocation is fine here) and execs CMD.
            use std::os::unix::process::CommandExt;
            let (ws, tmp) = (PathBuf::from(&args[1]), PathBuf::from(&args[2]));
            let mut p = Policy::empty();
            p.ro = vec!["/usr".into(), "/bin".into(), "/lib".into(), "/lib64".into(), "/etc".into(), "/proc".into()];
            p.rw = vec![ws.clone(), tmp.clone()];
            p.dev_rw = vec!["/dev/null".into()];
            p.landlock = true;
            p.landlock_scopes = true;
            p.netns = true;
            p.userns = true;
            p.limits = Limits::default_exec();
            if unsafe { libc::geteuid() } == 0 {
                p.run_as = Some((65534, 65534));
            }
            let mut prep = p.prepare().expect("prepare");
            prep.child_setup().expect("sandbox setup");
            let err = Command::new(&args[4]).args(&args[5..]).exec();
            eprintln!("exec failed: {err}");
            std::process::exit(127);
        }
        "first-byte" => {
            println!("hi");
        }
        _ => panic!("unknown helper {what}"),
    }
}

fn lo_up() -> String {
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
        if s < 0 {
            return errno_name(&std::io::Error::last_os_error());
        }
        let mut ifr: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo\0".iter().enumerate() {
            ifr.ifr_name[i] = *b as libc::c_char;
        }
        if libc::ioctl(s, libc::SIOCGIFFLAGS, &mut ifr) < 0 {
            return errno_name(&std::io::Error::last_os_error());
        }
        ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(s, libc::SIOCSIFFLAGS, &mut ifr) < 0 {
            return errno_name(&std::io::Error::last_os_error());
        }
        "OK".into()
    }
}

// ---------------------------------------------------------------- benchmark
fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let idx = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[idx]
}

/// One spawn-to-first-output sample in milliseconds.
fn bench_once(name: &str, d: &Dirs) -> Option<f64> {
    let bwrap_base: Vec<String> = {
        let ws = d.ws.display().to_string();
        let tmp = d.tmp.display().to_string();
        let mut v: Vec<String> = vec!["bwrap".into()];
        for a in [
            "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
            "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin", "--ro-bind", "/etc", "/etc",
            "--proc", "/proc", "--dev", "/dev",
        ] {
            v.push(a.into());
        }
        for a in ["--bind", &ws, &ws, "--bind", &tmp, "/tmp", "--chdir", &ws, "--die-with-parent"] {
            v.push(a.into());
        }
        v
    };
    {
        let mut cmd;
        let policy: Option<Policy>;
        let mut base = Policy::empty();
        base.ro = vec!["/usr".into(), "/bin".into(), "/lib".into(), "/lib64".into(), "/etc".into(), "/proc".into()];
        base.rw = vec![d.ws.clone(), d.tmp.clone()];
        base.dev_rw = vec!["/dev/null".into()];
        let full = |mut p: Policy| {
            p.landlock = true;
            p.landlock_scopes = true;
            p.netns = true;
            p.userns = true;
            p.limits = Limits::default_exec();
            if unsafe { libc::geteuid() } == 0 {
                p.run_as = Some((65534, 65534));
            }
            p
        };
        match name {
            "plain" => {
                cmd = Command::new("/bin/sh");
                policy = None;
            }
            "plain+empty-pre_exec" => {
                cmd = Command::new("/bin/sh");
                use std::os::unix::process::CommandExt;
                unsafe { cmd.pre_exec(|| Ok(())) };
                policy = None;
            }
            "rlimits" => {
                cmd = Command::new("/bin/sh");
                base.limits = Limits::default_exec();
                policy = Some(base);
            }
            "landlock" => {
                cmd = Command::new("/bin/sh");
                base.landlock = true;
                base.landlock_scopes = true;
                policy = Some(base);
            }
            "netns" => {
                cmd = Command::new("/bin/sh");
                base.netns = true;
                policy = Some(base);
            }
            "userns+netns" => {
                cmd = Command::new("/bin/sh");
                base.userns = true;
                base.netns = true;
                policy = Some(base);
            }
            "setuid" => {
                cmd = Command::new("/bin/sh");
                base.run_as = Some((65534, 65534));
                policy = Some(base);
            }
            "full" => {
                cmd = Command::new("/bin/sh");
                policy = Some(full(base));
            }
            "full+map-ids" => {
                cmd = Command::new("/bin/sh");
                let mut p = full(base);
                p.map_ids = true;
                policy = Some(p);
            }
            "full+mntns-tmp" => {
                cmd = Command::new("/bin/sh");
                let mut p = full(base);
                p.private_tmp = Some(d.tmp.clone());
                policy = Some(p);
            }
            "full+pidns" => {
                cmd = Command::new("/bin/sh");
                let mut p = full(base);
                p.pidns = true;
                policy = Some(p);
            }
            "full-via-helper" => {
                // posix_spawn (no pre_exec => std may use the vfork-like fast path) of a tiny
                // helper that sandboxes *itself* and then execs the command.
                cmd = Command::new(std::env::current_exe().unwrap());
                cmd.args(["helper", "exec-full"]);
                cmd.arg(&d.ws).arg(&d.tmp).args(["--", "/bin/sh"]);
                policy = None;
            }
            "bwrap-net" | "bwrap-net-user" | "bwrap-all" => {
                cmd = Command::new("/usr/bin/bwrap"); // absolute: keeps std on posix_spawn
                cmd.args(&bwrap_base[1..]);
                match name {
                    "bwrap-net" => {
                        cmd.arg("--unshare-net");
                    }
                    "bwrap-net-user" => {
                        cmd.args(["--unshare-user", "--unshare-net"]);
                    }
                    _ => {
                        cmd.args(["--unshare-all", "--new-session"]);
                    }
                }
                cmd.arg("/bin/sh");
                policy = None;
            }
            _ => panic!("unknown variant {name}"),
        }
        cmd.args(["-c", "echo hi"]).stdout(Stdio::piped()).stdin(Stdio::null()).stderr(Stdio::inherit());
        scrub_env(&mut cmd, &d.ws, &d.tmp);
        let t0 = Instant::now();
        // Policy preparation (ruleset building) is counted: it happens per exec.
        if let Some(p) = &policy {
            p.prepare().expect("prepare").install_std(&mut cmd);
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("{name}: spawn failed: {e}");
                return None;
            }
        };
        let mut b = [0u8; 1];
        let got = child.stdout.as_mut().unwrap().read(&mut b).unwrap();
        let dt = t0.elapsed();
        let _ = child.wait();
        if got != 1 {
            eprintln!("{name}: no output");
            return None;
        }
        Some(dt.as_secs_f64() * 1000.0)
    }
}

fn cmd_bench(args: &[String]) {
    let d = setup_dirs();
    let mut n = 200;
    let mut ballast_mb = 0usize;
    let mut variants: Vec<String> = vec![];
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "-n" => {
                i += 1;
                n = args[i].parse().unwrap()
            }
            "--ballast-mb" => {
                i += 1;
                ballast_mb = args[i].parse().unwrap()
            }
            v => variants.push(v.to_string()),
        }
        i += 1;
    }
    // Simulate a bigger daemon: fork() cost grows with the parent's mapped/touched memory.
    let mut ballast = vec![0u8; ballast_mb << 20];
    for j in (0..ballast.len()).step_by(4096) {
        ballast[j] = 1;
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("# n={n} (interleaved, 5 warm-up rounds dropped) ballast={ballast_mb}MiB loadavg(before)={}", load.trim());
    // Interleaved: every iteration runs each variant once, so background load hits all alike.
    let mut samples: Vec<Vec<f64>> = vec![vec![]; variants.len()];
    for i in 0..n + 5 {
        for (k, v) in variants.iter().enumerate() {
            let x = bench_once(v, &d).unwrap_or_else(|| panic!("variant {v} failed"));
            if i >= 5 {
                samples[k].push(x);
            }
        }
    }
    println!("| variant | p50 ms | p90 ms | p99 ms | mean ms | p50 delta vs plain ms |");
    println!("|---|---|---|---|---|---|");
    let base = pct(&mut samples[0].clone(), 0.5);
    for (k, v) in variants.iter().enumerate() {
        let s = &mut samples[k];
        let mean = s.iter().sum::<f64>() / s.len() as f64;
        let (p50, p90, p99) = (pct(s, 0.5), pct(s, 0.9), pct(s, 0.99));
        println!("| {v} | {p50:.2} | {p90:.2} | {p99:.2} | {mean:.2} | {:+.2} |", p50 - base);
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("# loadavg(after)={}", load.trim());
    std::hint::black_box(&ballast);
}

/// Time the unshare() syscalls themselves, inside a forked child, N times.
fn cmd_unshare_cost(args: &[String]) {
    let n: usize = args.first().map(|s| s.parse().unwrap()).unwrap_or(200);
    let flagsets: [(&str, libc::c_int); 5] = [
        ("NEWNET", libc::CLONE_NEWNET),
        ("NEWUSER", libc::CLONE_NEWUSER),
        ("NEWUSER|NEWNET", libc::CLONE_NEWUSER | libc::CLONE_NEWNET),
        ("NEWUSER|NEWNET|NEWNS", libc::CLONE_NEWUSER | libc::CLONE_NEWNET | libc::CLONE_NEWNS),
        ("NEWUSER|NEWNET|NEWPID", libc::CLONE_NEWUSER | libc::CLONE_NEWNET | libc::CLONE_NEWPID),
    ];
    println!("| unshare flags | p50 us | p90 us | p99 us | max us |");
    println!("|---|---|---|---|---|");
    for (name, flags) in flagsets {
        let mut v = vec![];
        for _ in 0..n {
            let mut fds = [0; 2];
            unsafe { libc::pipe(fds.as_mut_ptr()) };
            match unsafe { libc::fork() } {
                0 => unsafe {
                    let t = Instant::now();
                    let r = libc::unshare(flags);
                    let us = t.elapsed().as_nanos() as u64 / 1000;
                    let val: u64 = if r == 0 { us } else { u64::MAX };
                    libc::write(fds[1], (&val as *const u64).cast(), 8);
                    libc::_exit(0);
                },
                pid => unsafe {
                    let mut val = 0u64;
                    libc::read(fds[0], (&mut val as *mut u64).cast(), 8);
                    libc::waitpid(pid, std::ptr::null_mut(), 0);
                    libc::close(fds[0]);
                    libc::close(fds[1]);
                    if val == u64::MAX {
                        println!("{name}: unshare failed");
                        break;
                    }
                    v.push(val as f64);
                },
            }
        }
        if v.is_empty() {
            continue;
        }
        let max = v.iter().cloned().fold(0.0, f64::max);
        println!("| {name} | {:.0} | {:.0} | {:.0} | {:.0} |", pct(&mut v, 0.5), pct(&mut v, 0.9), pct(&mut v, 0.99), max);
    }
}

/// Startup probe as Ferry would run it: every check must pass or the exec tool is not offered.
fn cmd_probe() {
    let t0 = Instant::now();
    let mut ok = true;
    let mut check = |name: &str, pass: bool, detail: String| {
        println!("  [{}] {name}: {detail}", if pass { "ok" } else { "FAIL" });
        ok &= pass;
    };
    let abi = landlock_abi_raw();
    check("landlock ABI >= 3", abi >= 3, format!("{abi}"));
    let root = study_dir().join("probe");
    let ws = root.join("ws");
    let tmp = root.join("tmp");
    let deny = root.join("deny");
    for p in [&ws, &tmp, &deny] {
        std::fs::create_dir_all(p).unwrap();
    }
    std::fs::write(deny.join("canary"), "CANARY").unwrap();
    let uid = if unsafe { libc::geteuid() } == 0 { 65534 } else { unsafe { libc::geteuid() } };
    if unsafe { libc::geteuid() } == 0 {
        // workspace must belong to the sandbox uid
        for p in [&ws, &tmp] {
            std::os::unix::fs::chown(p, Some(uid), Some(uid)).unwrap();
        }
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut pol = Policy::recommended(&ws, &tmp, &[exe_dir()], &[deny.clone()]);
    if std::env::var_os("SBX_PROBE_NO_SETUID").is_some() {
        pol.run_as = None; // demonstrate that the probe catches the root NPROC exemption
    }
    let script = format!(
        "read go; \
         echo forks=$({h} helper forks 100 | cut -d' ' -f2 | cut -d/ -f1); \
         echo x > {ws}/w 2>/dev/null && echo ws_write=1 || echo ws_write=0; \
         cat {deny}/canary >/dev/null 2>&1 && echo canary=1 || echo canary=0; \
         echo x > {root}/outside 2>/dev/null && echo outside=1 || echo outside=0; \
         (echo > /dev/tcp/127.0.0.1/{port}) >/dev/null 2>&1 && echo tcp=1 || echo tcp=0; \
         echo nproc=$(ulimit -u); echo fsize=$(ulimit -f)",
        ws = ws.display(), deny = deny.display(), root = root.display(), h = helper_bin()
    );
    let mut cmd = Command::new("/bin/bash");
    cmd.args(["-c", &script]).current_dir(&ws).stdin(Stdio::piped()).stdout(Stdio::piped());
    scrub_env(&mut cmd, &ws, &tmp);
    let mut init_uid = String::from("?");
    let mut same_userns = true;
    let res = pol.prepare().map(|p| p.install_std(&mut cmd)).and_then(|_| cmd.spawn()).and_then(|mut child| {
        // spawn() returns after a successful exec, so credentials/namespaces are final here.
        let status = std::fs::read_to_string(format!("/proc/{}/status", child.id()))?;
        init_uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap_or("").split_whitespace().nth(1).unwrap_or("?").to_string();
        same_userns = std::fs::read_link(format!("/proc/{}/ns/user", child.id()))? == std::fs::read_link("/proc/self/ns/user")?;
        child.stdin.take().unwrap().write_all(b"go\n")?;
        child.wait_with_output()
    });
    match res {
        Err(e) => check("spawn sandboxed probe child", false, format!("{e}")),
        Ok(o) => {
            let out = String::from_utf8_lossy(&o.stdout).to_string();
            let get = |k: &str| out.lines().find_map(|l| l.strip_prefix(&format!("{k}="))).unwrap_or("?").to_string();
            check("spawn sandboxed probe child", o.status.success(), format!("{:?}", o.status));
            check("runs unprivileged (real uid in init ns != 0, from /proc/PID/status)", init_uid != "0", init_uid.clone());
            check("in a new user namespace (/proc/PID/ns/user differs)", !same_userns, format!("{}", !same_userns));
            let forks: usize = get("forks").parse().unwrap_or(999);
            check("RLIMIT_NPROC enforced (100 forks attempted, limit 64)", forks < 64, format!("{forks} succeeded"));
            check("workspace writable", get("ws_write") == "1", get("ws_write"));
            check("deny canary unreadable", get("canary") == "0", get("canary"));
            check("write outside workspace refused", get("outside") == "0", get("outside"));
            check("host loopback TCP unreachable", get("tcp") == "0", get("tcp"));
            check("RLIMIT_NPROC applied", get("nproc") == "64", get("nproc"));
            check("RLIMIT_FSIZE applied", get("fsize") != "unlimited", get("fsize"));
        }
    }
    let _ = std::fs::remove_file(root.join("outside"));
    println!("probe {} in {:?}", if ok { "PASSED: offer exec tool" } else { "FAILED: do not offer exec tool" }, t0.elapsed());
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rest = if args.len() > 1 { &args[1..] } else { &[][..] };
    match args.first().map(|s| s.as_str()) {
        Some("abi") => cmd_abi(),
        Some("fs-demo") => cmd_fs_demo(),
        Some("net-demo") => cmd_net_demo(),
        Some("run") => cmd_run(rest),
        Some("bench") => cmd_bench(rest),
        Some("unshare-cost") => cmd_unshare_cost(rest),
        Some("helper") => helper(rest),
        Some("probe") => cmd_probe(),
        _ => {
            eprintln!(
                "usage: sbx abi | fs-demo | net-demo | unshare-cost [N] | bench [-n N] [--ballast-mb M] VARIANT... \
                 | run [--landlock --scopes --deny-tcp --userns --netns --pidns --map-ids --private-tmp --uid U \
                 --nproc N --as SZ --data SZ --fsize SZ --cpu S --cgroup PROCS_FILE --rlimits-first --recommended --time] -- CMD..."
            );
            let _ = Path::new("");
        }
    }
}
