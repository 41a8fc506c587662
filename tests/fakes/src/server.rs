//! Serving a fake on an ephemeral loopback port for exactly as long as a test holds it.

use std::net::SocketAddr;

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A running fake. Dropping it stops the server; [`FakeServer::shutdown`] also waits for
/// in-flight requests to finish.
pub struct FakeServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl FakeServer {
    /// Serves `router` on `127.0.0.1` with a port the OS picks.
    pub async fn start(router: Router) -> std::io::Result<Self> {
        Self::start_on(router, SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Serves `router` on `addr`: a fake that comes up late, at an address a client was
    /// already given (a platform API that was down when the gateway started).
    pub async fn start_on(router: Router, addr: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, router).with_graceful_shutdown(async {
                // Either an explicit stop or the handle being dropped ends the server.
                let _ = stopped.await;
            });
            if let Err(error) = served.await {
                tracing::warn!(%error, %addr, "fake server stopped with an error");
            }
        });
        Ok(Self { addr, stop: Some(stop), task: Some(task) })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash, for `api_url` / `base_url` settings.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, lets in-flight requests finish, and waits until the server is gone.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    async fn get_path(addr: SocketAddr, path: &str) -> std::io::Result<String> {
        let mut stream = TcpStream::connect(addr).await?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        Ok(response)
    }

    #[tokio::test]
    async fn serves_the_router_on_a_loopback_port() {
        let server = FakeServer::start(Router::new().route("/ping", get(|| async { "pong" }))).await.unwrap();
        assert!(server.addr().ip().is_loopback());
        assert_eq!(server.url(), format!("http://{}", server.addr()));
        let response = get_path(server.addr(), "/ping").await.unwrap();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.ends_with("pong"), "{response}");
    }

    #[tokio::test]
    async fn shutdown_frees_the_port() {
        let server = FakeServer::start(Router::new()).await.unwrap();
        let addr = server.addr();
        server.shutdown().await;
        assert!(TcpStream::connect(addr).await.is_err());
    }
}

/// How a call whose connection a fake dropped ended (the Discord and Slack fakes'
/// `apply_then_drop_next` and `drop_next_before_apply`): the client sees the same
/// connection error either way, and only the platform's state tells them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// Nothing was applied: the connection closed before the call ran.
    BeforeApply,
    /// The call ran (its effects are visible) and would have answered with this HTTP
    /// status, but the connection closed instead.
    AfterApply(u16),
}
