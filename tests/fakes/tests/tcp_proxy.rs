//! `TcpProxy` against a loopback echo server: bytes go both ways, `cut` resets what is open
//! and refuses new connections, `blackhole` silences without closing, `restore` lets new
//! connections through again.

use std::net::SocketAddr;
use std::time::Duration;

use ferry_fakes::TcpProxy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const PATIENCE: Duration = Duration::from_secs(5);

/// An echo server on loopback; runs until the test ends.
async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { continue };
            tokio::spawn(async move {
                let mut buffer = [0u8; 1024];
                while let Ok(n) = socket.read(&mut buffer).await {
                    if n == 0 || socket.write_all(&buffer[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    address
}

/// Writes `text` and reads the echo: `Ok` with what came back, `Err` if the connection
/// failed, or timed out (`None`) if nothing came back within a second.
async fn round_trip(stream: &mut TcpStream, text: &str) -> Option<std::io::Result<String>> {
    if let Err(error) = stream.write_all(text.as_bytes()).await {
        return Some(Err(error));
    }
    let mut buffer = vec![0u8; text.len()];
    match tokio::time::timeout(Duration::from_secs(1), stream.read_exact(&mut buffer)).await {
        Ok(Ok(_)) => Some(Ok(String::from_utf8_lossy(&buffer).into_owned())),
        Ok(Err(error)) => Some(Err(error)),
        Err(_) => None,
    }
}

async fn connect(proxy: &TcpProxy) -> std::io::Result<TcpStream> {
    TcpStream::connect(("127.0.0.1", proxy.port())).await
}

#[tokio::test]
async fn bytes_go_through_until_a_cut_resets_the_connection_and_new_ones_fail_until_restored() {
    let proxy = TcpProxy::start(echo_server().await).await.unwrap();
    let mut stream = connect(&proxy).await.unwrap();
    assert_eq!(round_trip(&mut stream, "hello").await.unwrap().unwrap(), "hello");

    proxy.cut();
    let broken = tokio::time::timeout(PATIENCE, async {
        loop {
            if let Some(Err(_)) = round_trip(&mut stream, "x").await {
                return;
            }
        }
    })
    .await;
    assert!(broken.is_ok(), "the open connection was reset");
    // A new connection is accepted and reset at once: nothing comes back.
    if let Ok(mut refused) = connect(&proxy).await {
        assert!(!matches!(round_trip(&mut refused, "y").await, Some(Ok(_))), "no echo while cut");
    }

    proxy.restore();
    let mut again = connect(&proxy).await.unwrap();
    assert_eq!(round_trip(&mut again, "back").await.unwrap().unwrap(), "back");
}

#[tokio::test]
async fn a_blackhole_keeps_the_connection_open_and_silent_until_restored() {
    let proxy = TcpProxy::start(echo_server().await).await.unwrap();
    let mut stream = connect(&proxy).await.unwrap();
    assert_eq!(round_trip(&mut stream, "hello").await.unwrap().unwrap(), "hello");

    proxy.blackhole();
    // Let the forwarding task see the change before the next bytes.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(round_trip(&mut stream, "lost").await.is_none(), "no answer and no error: silence");

    proxy.restore();
    let mut fresh = connect(&proxy).await.unwrap();
    assert_eq!(round_trip(&mut fresh, "fresh").await.unwrap().unwrap(), "fresh");
}

#[test]
fn a_url_is_pointed_at_the_proxy() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let proxy = TcpProxy::start("127.0.0.1:9".parse().unwrap()).await.unwrap();
        let port = proxy.port();
        assert_eq!(
            proxy.rewrite_url("postgres://ferry@127.0.0.1:5432/ferry_t_1?sslmode=disable"),
            format!("postgres://ferry@127.0.0.1:{port}/ferry_t_1?sslmode=disable")
        );
        assert_eq!(proxy.rewrite_url("postgres://db.internal/ferry"), format!("postgres://127.0.0.1:{port}/ferry"));
    });
}
