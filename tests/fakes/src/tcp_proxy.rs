//! A TCP proxy on loopback that a test can cut: for faults between a process and a server
//! that are not the server's own (a replica losing its database while the database stays up).
//!
//! Bytes are forwarded both ways, connection by connection. [`TcpProxy::cut`] resets every
//! connection open through it (RST, as a dead route or a restarted middlebox does) and
//! refuses new ones; [`TcpProxy::blackhole`] keeps every connection open but forwards
//! nothing, so the client sees no error, only silence, until its own timeouts or keepalives
//! give up. [`TcpProxy::restore`] ends either: new connections go through again (connections
//! black-holed stay silent and are reset, as their bytes are gone).
//!
//! ```no_run
//! # async fn example(upstream: std::net::SocketAddr) -> std::io::Result<()> {
//! let proxy = ferry_fakes::TcpProxy::start(upstream).await?;
//! // Point the client at 127.0.0.1:{proxy.port()} instead of `upstream`.
//! proxy.cut();
//! proxy.restore();
//! # Ok(()) }
//! ```

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with traffic now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Forward,
    /// Reset every connection, refuse new ones.
    Cut,
    /// Keep connections, forward nothing; new connections are accepted and left silent.
    Blackhole,
}

/// A running proxy; stops (resetting what is open) when dropped.
pub struct TcpProxy {
    port: u16,
    mode: Arc<watch::Sender<Mode>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.mode.send_replace(Mode::Cut);
        self.accept.abort();
    }
}

impl TcpProxy {
    /// Listens on a free loopback port and forwards each connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let mode = Arc::new(watch::Sender::new(Mode::Forward));
        let accepting = Arc::clone(&mode);
        let accept = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else { continue };
                let mode = accepting.subscribe();
                tokio::spawn(serve(client, upstream, mode));
            }
        });
        Ok(Self { port, mode, accept })
    }

    /// The proxy's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `url` (a `postgres://…@host:port/…` or similar URL) pointed at this proxy instead.
    pub fn rewrite_url(&self, url: &str) -> String {
        let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
        let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
        let (credentials, _) = authority.rsplit_once('@').map_or(("", authority), |(c, h)| (c, h));
        let at = if credentials.is_empty() { String::new() } else { format!("{credentials}@") };
        format!("{scheme}://{at}127.0.0.1:{}/{path}", self.port)
    }

    /// Resets every open connection and refuses new ones until [`Self::restore`].
    pub fn cut(&self) {
        self.mode.send_replace(Mode::Cut);
    }

    /// Forwards nothing, in either direction, on any connection until [`Self::restore`];
    /// nothing is closed.
    pub fn blackhole(&self) {
        self.mode.send_replace(Mode::Blackhole);
    }

    /// Forwards again: new connections go through.
    pub fn restore(&self) {
        self.mode.send_replace(Mode::Forward);
    }
}

/// One client connection: forwarded until the proxy cuts or black-holes it, or either side
/// closes.
async fn serve(client: TcpStream, upstream: SocketAddr, mut mode: watch::Receiver<Mode>) {
    let now = *mode.borrow_and_update();
    match now {
        Mode::Cut => return reset(client),
        Mode::Blackhole => return silence(client, mode).await,
        Mode::Forward => {}
    }
    let Ok(server) = TcpStream::connect(upstream).await else { return reset(client) };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let outcome = tokio::select! {
        () = pump(&mut client_read, &mut server_write) => Mode::Forward,
        () = pump(&mut server_read, &mut client_write) => Mode::Forward,
        changed = until_not_forwarding(&mut mode) => changed,
    };
    let Ok(client) = client_read.reunite(client_write) else { return };
    match outcome {
        Mode::Blackhole => {
            // Held open and silent; the server side is dropped (its bytes go nowhere).
            drop(server_read.reunite(server_write));
            silence(client, mode).await;
        }
        _ => reset(client),
    }
}

/// Copies `from` into `to` until either ends.
async fn pump(from: &mut tokio::net::tcp::OwnedReadHalf, to: &mut tokio::net::tcp::OwnedWriteHalf) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to.write_all(&buffer[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Resolves with the mode once it is no longer [`Mode::Forward`].
async fn until_not_forwarding(mode: &mut watch::Receiver<Mode>) -> Mode {
    loop {
        let now = *mode.borrow_and_update();
        if now != Mode::Forward {
            return now;
        }
        if mode.changed().await.is_err() {
            return Mode::Cut;
        }
    }
}

/// Keeps `client` open, reading and dropping what it sends, until the proxy leaves the
/// blackhole; then resets it (whatever it sent meanwhile is lost).
async fn silence(mut client: TcpStream, mut mode: watch::Receiver<Mode>) {
    let mut sink = vec![0u8; 16 * 1024];
    loop {
        tokio::select! {
            read = client.read(&mut sink) => if matches!(read, Ok(0) | Err(_)) { return },
            changed = mode.changed() => {
                if changed.is_err() || *mode.borrow_and_update() != Mode::Blackhole {
                    return reset(client);
                }
            }
        }
    }
}

/// Closes `client` with a RST rather than a FIN.
fn reset(client: TcpStream) {
    let _ = client.set_zero_linger();
    drop(client);
}
