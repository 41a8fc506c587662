//! Files the agent names, from its workspace and from URLs, against the rules.

use std::io::Cursor;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use super::*;
use crate::agent::tools::web::ssrf::AddressPolicy;
use crate::agent::tools::web::{FetchSettings, WebFetch};
use crate::config::{Environment, MediaConfig};

/// 127.0.0.2 stands in for a public site; 127.0.0.1 stays private.
const STAND_IN: [u8; 4] = [127, 0, 0, 2];

struct Setup {
    root: tempfile::TempDir,
    outgoing: Outgoing,
}

impl Setup {
    fn workspace(&self) -> PathBuf {
        self.root.path().join("workspace")
    }
}

fn setup() -> Setup {
    let root = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(root.path().join("workspace")).expect("workspace");
    let settings = FetchSettings {
        timeout: Duration::from_secs(10),
        max_bytes: 1_000_000,
        max_redirects: 3,
        policy: AddressPolicy::new(false).treating_as_public([IpAddr::from(STAND_IN)]),
    };
    let env = Environment::new(Vec::<(String, String)>::new(), "/");
    let media = Media::open(&root.path().join("media"), &MediaConfig::default(), &env)
        .expect("media")
        .with_web(WebFetch::new(settings).expect("fetcher"));
    let outgoing = Outgoing::new(Arc::new(media), Some(Arc::new(Sandbox::unconfined(root.path()))));
    Setup { root, outgoing }
}

fn png(width: u32, height: u32) -> Vec<u8> {
    let mut bytes = Cursor::new(Vec::new());
    image::RgbImage::new(width, height).write_to(&mut bytes, image::ImageFormat::Png).expect("png");
    bytes.into_inner()
}

/// Serves `bytes` at `/files/report.png` on `ip`.
async fn serve(ip: [u8; 4], bytes: Vec<u8>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind(SocketAddr::from((ip, 0))).await.expect("bind");
    let address = listener.local_addr().expect("address");
    let app = axum::Router::new().route("/files/report.png", axum::routing::get(move || async move { bytes }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    address
}

#[tokio::test]
async fn a_workspace_file_becomes_a_stored_attachment_of_its_sniffed_type() {
    let setup = setup();
    std::fs::create_dir_all(setup.workspace().join("out")).expect("dir");
    std::fs::write(setup.workspace().join("out/chart.dat"), png(64, 48)).expect("write");
    let file = setup.outgoing.attach("out/chart.dat", "s").await.expect("attached");
    assert_eq!((file.kind, file.mime_type.as_deref()), (AttachmentKind::Image, Some("image/png")));
    // Image headers are read with the `media` feature; without it platforms measure it.
    let dimensions = cfg!(feature = "media").then_some((64, 48));
    assert_eq!((file.file_name.as_deref(), file.dimensions), (Some("chart.dat"), dimensions));
    let stored = file.path.expect("stored");
    assert!(stored.starts_with(setup.root.path().join("media")), "{stored:?}");
    assert_eq!(std::fs::read(stored).expect("stored bytes"), png(64, 48));
}

#[tokio::test]
async fn a_path_out_of_the_workspace_or_an_empty_file_is_refused() {
    let setup = setup();
    std::fs::write(setup.root.path().join("secret.txt"), "key").expect("write");
    let escaped = setup.outgoing.attach("../secret.txt", "s").await.expect_err("refused");
    assert!(escaped.0.contains("outside the workspace"), "{escaped}");
    std::fs::write(setup.workspace().join("empty.txt"), "").expect("write");
    let empty = setup.outgoing.attach("empty.txt", "s").await.expect_err("refused");
    assert!(empty.0.contains("is empty"), "{empty}");
    let missing = setup.outgoing.attach("nope.png", "s").await.expect_err("refused");
    assert!(missing.0.contains("does not exist"), "{missing}");
}

#[tokio::test]
async fn a_url_is_fetched_under_the_ssrf_guard() {
    let setup = setup();
    let public = serve(STAND_IN, png(10, 20)).await;
    let file = setup.outgoing.attach(&format!("http://{public}/files/report.png"), "s").await.expect("attached");
    let dimensions = cfg!(feature = "media").then_some((10, 20));
    assert_eq!((file.file_name.as_deref(), file.dimensions), (Some("report.png"), dimensions));
    let private = serve([127, 0, 0, 1], png(10, 20)).await;
    let refused = setup.outgoing.attach(&format!("http://{private}/files/report.png"), "s").await.expect_err("refused");
    assert!(refused.0.contains("127.0.0.1"), "the guard names what it refused: {refused}");
}

#[tokio::test]
async fn without_a_workspace_or_a_fetcher_nothing_can_be_named() {
    let setup = setup();
    let bare = Outgoing::new(setup.outgoing.media.clone(), None);
    let path = bare.attach("chart.png", "s").await.expect_err("no workspace");
    assert!(path.0.contains("no workspace"), "{path}");
    let env = Environment::new(Vec::<(String, String)>::new(), "/");
    let no_web = Arc::new(Media::open(&setup.root.path().join("m2"), &MediaConfig::default(), &env).expect("media"));
    let url = Outgoing::new(no_web, None).attach("https://example.com/a.png", "s").await.expect_err("no fetcher");
    assert!(url.0.contains("cannot be fetched"), "{url}");
}
