//! Multi-threaded tokio parent: unshare(CLONE_NEWUSER) fails in the parent itself, but works
//! from pre_exec (the forked child is single-threaded). Also: concurrent sandboxed spawns.
use sbx::*;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Instant;
use tokio::io::AsyncReadExt;

fn threads() -> String {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Threads:"))
        .unwrap()
        .to_string()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    // Make sure worker threads exist.
    let hs: Vec<_> = (0..8).map(|_| tokio::spawn(async { tokio::task::yield_now().await })).collect();
    for h in hs {
        h.await.unwrap();
    }
    println!("parent {}", threads());
    // 1. unshare(CLONE_NEWUSER) in the multi-threaded parent -> EINVAL. Done on a throwaway
    //    blocking thread so a (surprising) success would not change the daemon itself... it would
    //    change only that thread's credentials; it is expected to fail anyway.
    let r = tokio::task::spawn_blocking(|| unsafe {
        if libc::unshare(libc::CLONE_NEWUSER) == 0 { "OK".to_string() } else { errno_name(&std::io::Error::last_os_error()) }
    })
    .await
    .unwrap();
    println!("unshare(CLONE_NEWUSER) in multi-threaded parent: {r}");

    // 2. Same thing from pre_exec of tokio::process::Command, many concurrent spawns.
    let ws = PathBuf::from("/work/sandbox-study/run/ws");
    let tmp = PathBuf::from("/work/sandbox-study/run/tmp");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    let exe_dir = std::env::current_exe().unwrap().parent().unwrap().to_path_buf();
    let pol = Policy::recommended(&ws, &tmp, &[exe_dir], &[]);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let sbx = std::env::current_exe().unwrap().parent().unwrap().join("sbx");
    let n = 64;
    let t = Instant::now();
    let mut tasks = vec![];
    for i in 0..n {
        let pol = pol.clone();
        let ws = ws.clone();
        let tmp = tmp.clone();
        let sbx = sbx.clone();
        tasks.push(tokio::spawn(async move {
            let mut cmd = tokio::process::Command::new("/bin/sh");
            cmd.arg("-c")
                .arg(format!("echo {i} $(id -u) $({} helper tcp 127.0.0.1:{port})", sbx.display()))
                .env_clear()
                .env("PATH", "/usr/bin:/bin")
                .env("TMPDIR", &tmp)
                .current_dir(&ws)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true);
            let t0 = Instant::now();
            pol.prepare().unwrap().install_tokio(&mut cmd);
            let mut child = cmd.spawn().map_err(|e| format!("spawn: {e}"))?;
            let mut out = String::new();
            child.stdout.take().unwrap().read_to_string(&mut out).await.unwrap();
            let st = child.wait().await.unwrap();
            Ok::<_, String>((out.trim().to_string(), st.success(), t0.elapsed()))
        }));
    }
    let mut ok = 0;
    let mut sample = String::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok((out, true, _)) if out.ends_with("ENETUNREACH") => {
                ok += 1;
                if sample.is_empty() {
                    sample = out;
                }
            }
            other => println!("unexpected: {other:?}"),
        }
    }
    println!(
        "{ok}/{n} concurrent sandboxed tokio spawns OK (userns+netns+landlock in pre_exec; tcp to host loopback refused); e.g. '{sample}'; total {:?}",
        t.elapsed()
    );
    println!("parent after spawns {}", threads());
}
