//! The web chat's files over HTTP, without a browser: `POST /webchat/upload` (the token, the
//! size limit before and while reading, refused types), `GET /webchat/media/<id>` (headers
//! that keep a file from running, 404 and 400), `chat.send` naming uploads (the model sees
//! the image; unknown ids are refused), `chat.history` listing them (expired ones marked), and
//! a file the agent sends with `message` reaching the chat as `files` on a `chat` event.

#[path = "common/gateway.rs"]
mod gw;
#[path = "common/runner.rs"]
mod runner;

use std::io::Cursor;

use ferry::config::{Config, SandboxScope, Secret};
use ferry_fakes::{ToolCall, Turn};
use gw::{Client, gateway, gateway_with_media};
use serde_json::{Value, json};

const TOKEN: &str = "s3cret";

fn config() -> Config {
    let mut config = Config::default();
    config.gateway.auth_token = Some(Secret::new(TOKEN));
    config.media.channel_max_mb.insert("webchat".into(), 1);
    config.tools.sandbox.scope = SandboxScope::Agent;
    config
}

fn png(width: u32, height: u32) -> Vec<u8> {
    let image = image::RgbImage::from_fn(width, height, |x, y| image::Rgb([(x * 7) as u8, (y * 5) as u8, 99]));
    let mut bytes = Cursor::new(Vec::new());
    image.write_to(&mut bytes, image::ImageFormat::Png).expect("encode a PNG");
    bytes.into_inner()
}

struct Http {
    base: String,
    client: reqwest::Client,
}

impl Http {
    fn new(gw: &gw::Gw) -> Self {
        Self { base: format!("http://{}", gw.address), client: reqwest::Client::new() }
    }

    async fn upload(&self, name: &str, body: impl Into<reqwest::Body>, token: Option<&str>) -> (u16, Value) {
        let mut request = self.client.post(format!("{}/webchat/upload?name={name}", self.base)).body(body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.expect("upload");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn download(&self, id: &str, token: Option<&str>) -> reqwest::Response {
        let mut request = self.client.get(format!("{}/webchat/media/{id}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send().await.expect("download")
    }
}

async fn connect(gw: &gw::Gw, id: &str) -> (Client, Value) {
    let mut client = Client::open(gw).await;
    let hello = client.request("connect", json!({"auth": {"token": TOKEN}, "client": {"id": id}})).await;
    assert_eq!(hello["ok"], true, "{hello}");
    (client, hello["payload"].clone())
}

#[tokio::test]
async fn uploads_need_the_token_stay_within_the_limit_and_refuse_programs() {
    let gw = gateway_with_media(config()).await;
    let http = Http::new(&gw);
    let picture = png(40, 30);

    for token in [None, Some("guess")] {
        let (status, body) = http.upload("dot.png", picture.clone(), token).await;
        assert_eq!((status, body["error"]["code"].as_str()), (401, Some("UNAUTHORIZED")), "{body}");
    }

    // Announced too large: refused before a byte is read.
    let (status, body) = http.upload("big.bin", vec![7u8; 2 * 1024 * 1024], Some(TOKEN)).await;
    assert_eq!(status, 413, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("\"big.bin\" is 2 MB, over the 1 MB limit"), "{message}");

    // Not announced (chunked): refused once the bytes pass the limit.
    let chunks = (0..40).map(|_| Ok::<_, std::io::Error>(vec![1u8; 64 * 1024]));
    let streamed = reqwest::Body::wrap_stream(futures::stream::iter(chunks));
    let (status, body) = http.upload("stream.bin", streamed, Some(TOKEN)).await;
    assert_eq!((status, body["error"]["code"].as_str()), (413, Some("TOO_LARGE")), "{body}");

    let mut program = vec![0x7F, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0];
    program.resize(256, 0);
    let (status, body) = http.upload("photo.jpg", program, Some(TOKEN)).await;
    assert_eq!((status, body["error"]["code"].as_str()), (415, Some("REFUSED_TYPE")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap_or_default().contains("application/x-executable"), "{body}");

    let (status, body) = http.upload("", Vec::<u8>::new(), Some(TOKEN)).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("EMPTY")), "{body}");

    let (status, file) = http.upload("..%2Fmy%20dot.png", picture.clone(), Some(TOKEN)).await;
    assert_eq!(status, 200, "{file}");
    let id = ferry::media::hex_digest(&picture);
    assert_eq!(
        file,
        json!({"id": id, "name": "my dot.png", "mimeType": "image/png", "size": picture.len(), "width": 40, "height": 30})
    );
}

#[tokio::test]
async fn downloads_carry_their_sniffed_type_and_cannot_run_in_the_page() {
    let gw = gateway_with_media(config()).await;
    let http = Http::new(&gw);
    let picture = png(8, 8);
    let (_, image) = http.upload("dot.png", picture.clone(), Some(TOKEN)).await;
    let (_, page) = http.upload("page.png", "<html><script>alert(1)</script></html>", Some(TOKEN)).await;

    assert_eq!(http.download(image["id"].as_str().unwrap(), None).await.status(), 401);

    let response = http.download(image["id"].as_str().unwrap(), Some(TOKEN)).await;
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    assert_eq!(headers["content-type"], "image/png");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["content-disposition"], "inline", "a PNG may show in the page");
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("sandbox"), "{csp}");
    assert_eq!(response.bytes().await.unwrap().as_ref(), picture.as_slice());

    // Named .png, but a web page: served as what it is, only as a download, in a sandbox.
    let response = http.download(page["id"].as_str().unwrap(), Some(TOKEN)).await;
    assert_eq!(response.headers()["content-type"], "text/html; charset=utf-8");
    assert_eq!(response.headers()["content-disposition"], "attachment");
    assert!(response.headers().contains_key("content-security-policy"));

    let unknown = http.download(&"0".repeat(64), Some(TOKEN)).await;
    assert_eq!(unknown.status(), 404);
    let body: Value = unknown.json().await.unwrap();
    assert_eq!(body["error"]["code"], "NOT_FOUND");
    for bad in ["abc", &"A".repeat(64), &"g".repeat(64), "..%2F..%2Fetc%2Fpasswd"] {
        let status = http.download(bad, Some(TOKEN)).await.status();
        assert_eq!(status, 400, "{bad}");
    }
}

#[tokio::test]
async fn without_media_there_is_no_file_endpoint_and_the_handshake_offers_none() {
    let gw = gateway(Config::default()).await;
    let http = Http::new(&gw);
    let (status, _) = http.upload("dot.png", png(2, 2), None).await;
    assert_eq!(status, 404);
    assert_eq!(http.download(&"0".repeat(64), None).await.status(), 404);
    let (_client, hello) = Client::connect(&gw, "browser-1").await;
    assert!(hello["features"].get("uploads").is_none(), "{hello}");

    let gw = gateway_with_media(config()).await;
    let (_client, hello) = connect(&gw, "browser-1").await;
    assert_eq!(hello["features"]["uploads"]["maxBytes"], 1024 * 1024);
}

#[tokio::test]
async fn a_message_of_only_an_uploaded_image_reaches_the_model_and_its_history() {
    let gw = gateway_with_media(config()).await;
    gw.fake.push(Turn::text(["A gradient."]));
    let http = Http::new(&gw);
    let (_, file) = http.upload("shot.png", png(64, 48), Some(TOKEN)).await;
    let id = file["id"].as_str().unwrap().to_owned();
    let (mut client, _) = connect(&gw, "browser-1").await;

    let refused = client
        .request("chat.send", json!({"message": "", "idempotencyKey": "k0", "attachments": [{"id": "0".repeat(64)}]}))
        .await;
    assert_eq!(refused["error"]["code"], "INVALID_REQUEST", "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("upload it again"), "{refused}");
    let empty = client.request("chat.send", json!({"message": " ", "idempotencyKey": "k1"})).await;
    assert_eq!(empty["error"]["code"], "INVALID_REQUEST", "no text and no files: {empty}");

    let sent = client
        .request(
            "chat.send",
            json!({"message": "", "idempotencyKey": "k2", "attachments": [{"id": id, "name": "shot.png"}]}),
        )
        .await;
    assert_eq!(sent["ok"], true, "{sent}");
    let events = client.chat_events("k2").await;
    let last = events.last().unwrap();
    assert_eq!(last["message"]["text"], "A gradient.", "{last}");

    let requests = gw.fake.requests();
    let images = requests.last().unwrap().images();
    assert_eq!(images.len(), 1, "one image for the model");
    assert_eq!(images[0].pixels, Some((64, 48)));

    let history = client.request("chat.history", json!({})).await;
    let user = &history["payload"]["messages"][0];
    assert_eq!(user["role"], "user", "{history}");
    let files = user["files"].as_array().expect("the user's files");
    assert_eq!(files.len(), 1, "{user}");
    assert_eq!((files[0]["mimeType"].as_str(), files[0]["width"].as_u64()), (Some("image/png"), Some(64)));
    assert_eq!(files[0]["name"], "shot.png");
    assert!(files[0].get("expired").is_none(), "{user}");

    // Swept from the store: the history says so, and the page shows a placeholder.
    std::fs::remove_dir_all(gw.state_dir().join("media")).unwrap();
    let history = client.request("chat.history", json!({})).await;
    assert_eq!(history["payload"]["messages"][0]["files"][0]["expired"], true, "{history}");
}

#[tokio::test]
async fn a_file_the_agent_sends_with_message_reaches_the_chat_as_files() {
    let gw = gateway_with_media(config()).await;
    let picture = png(20, 10);
    std::fs::write(gw.workspace().join("chart.png"), &picture).unwrap();
    let arguments = json!({"text": "Here is the chart.", "media": "chart.png"}).to_string();
    gw.fake.push(Turn::tool_calls([ToolCall::new("call_1", "message", arguments)]));
    gw.fake.push(Turn::text(["Sent."]));
    let (mut client, _) = connect(&gw, "browser-1").await;
    let sent = client.request("chat.send", json!({"message": "the chart please", "idempotencyKey": "k1"})).await;
    assert_eq!(sent["ok"], true, "{sent}");
    let event = client.event(|frame| frame["event"] == "chat" && frame["payload"]["files"].is_array()).await;
    let payload = &event["payload"];
    assert_eq!(payload["message"]["text"], "Here is the chart.", "the caption: {payload}");
    let file = &payload["files"][0];
    assert_eq!(file["id"], ferry::media::hex_digest(&picture), "{payload}");
    assert_eq!((file["name"].as_str(), file["width"].as_u64()), (Some("chart.png"), Some(20)));

    let http = Http::new(&gw);
    let response = http.download(file["id"].as_str().unwrap(), Some(TOKEN)).await;
    assert_eq!(response.bytes().await.unwrap().as_ref(), picture.as_slice(), "the page can fetch it");
}
