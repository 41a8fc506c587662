//! Files: attachments on injected messages and the CDN that serves them, and multipart
//! creates with their checks. The multipart bodies are written out by hand, byte for byte,
//! so the wire format is checked independently of any client's encoder.

use std::time::Duration;

use ferry_fakes::{DISCORD_UPLOAD_LIMIT, DiscordFile, DiscordUser, FakeDiscord};
use serde_json::{Value, json};

use crate::gateway::{frame, identified};
use crate::{TOKEN, fake};

const BOUNDARY: &str = "ferry-test-boundary-7f3a";

/// A PNG of `width` × `height` pixels.
fn png(width: u32, height: u32) -> Vec<u8> {
    let mut bytes = Vec::new();
    image::RgbImage::new(width, height)
        .write_to(&mut std::io::Cursor::new(&mut bytes), image::ImageFormat::Png)
        .expect("encoding a PNG in memory");
    bytes
}

/// A `multipart/form-data` body: `payload_json` (if any), then each `(field, filename,
/// content type, bytes)` part.
fn form(payload: Option<&str>, files: &[(&str, &str, &str, &[u8])]) -> Vec<u8> {
    let mut body = Vec::new();
    if let Some(payload) = payload {
        body.extend_from_slice(
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"payload_json\"\r\n\
                 Content-Type: application/json\r\n\r\n{payload}\r\n"
            )
            .as_bytes(),
        );
    }
    for (field, filename, content_type, bytes) in files {
        body.extend_from_slice(
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{field}\"; filename=\"{filename}\"\r\n\
                 Content-Type: {content_type}\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    body
}

/// Posts a multipart create to channel 10; returns the status and the JSON body.
async fn upload(discord: &FakeDiscord, body: Vec<u8>) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{}/api/v10/channels/10/messages", discord.url()))
        .header("Authorization", format!("Bot {TOKEN}"))
        .header("Content-Type", format!("multipart/form-data; boundary={BOUNDARY}"))
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, serde_json::from_str(&response.text().await.unwrap()).unwrap_or(Value::Null))
}

/// GETs a link; returns the status, `Content-Length`, `Content-Type` and the bytes.
async fn fetch(url: &str) -> (u16, Option<u64>, Option<String>, Vec<u8>) {
    let response = reqwest::get(url).await.unwrap();
    let status = response.status().as_u16();
    let length = response.content_length();
    let content_type = response.headers().get("content-type").and_then(|value| value.to_str().ok()).map(str::to_owned);
    (status, length, content_type, response.bytes().await.unwrap().to_vec())
}

#[tokio::test]
async fn an_injected_attachment_has_discords_shape_and_its_signed_link_serves_the_bytes() {
    let discord = fake().await;
    let image = png(5, 4);
    let files = vec![DiscordFile::new("my cat.png", Some("image/png"), image.clone())];
    discord.dm_with_files(&DiscordUser::new(42, "ada"), "", files);
    let (mut socket, _) = identified(&discord).await;
    let create = frame(&mut socket).await.unwrap();
    assert_eq!(create["t"], "MESSAGE_CREATE");
    let attachment = &create["d"]["attachments"][0];
    assert_eq!(
        (attachment["filename"].as_str(), attachment["size"].as_u64(), attachment["content_type"].as_str()),
        (Some("my cat.png"), Some(image.len() as u64), Some("image/png"))
    );
    assert_eq!((attachment["width"].as_u64(), attachment["height"].as_u64()), (Some(5), Some(4)));
    assert!(attachment["id"].as_str().is_some_and(|id| id.parse::<u64>().is_ok()));
    let url = attachment["url"].as_str().unwrap();
    assert!(url.contains("/attachments/") && url.contains("/my_cat.png?ex=") && url.contains("&hm="), "{url}");
    assert_eq!(fetch(url).await, (200, Some(image.len() as u64), Some("image/png".to_owned()), image.clone()));
    assert_eq!(fetch(attachment["proxy_url"].as_str().unwrap()).await.3, image, "the media proxy serves it too");

    let unsigned = url.split('?').next().unwrap();
    assert_eq!(fetch(unsigned).await.0, 404, "a link without its signature is refused");
    discord.expire_attachment_links();
    let (status, _, _, body) = fetch(url).await;
    assert_eq!((status, body.as_slice()), (404, b"This content is no longer available.".as_slice()));
    let requests = discord.cdn_requests();
    assert_eq!(requests.iter().map(|request| request.status).collect::<Vec<_>>(), [200, 200, 404, 404]);
    assert!(requests.iter().all(|request| !request.authorization));
}

#[tokio::test]
async fn a_multipart_create_attaches_its_files_under_their_attachments_names() {
    let discord = fake().await;
    discord.add_guild_channel(1, 10);
    let image = png(2, 3);
    let payload = r#"{"content": "two files", "nonce": "n1", "enforce_nonce": true,
        "attachments": [{"id": 0, "filename": "chart.png"}, {"id": 1, "filename": "data.csv"}]}"#;
    let files: [(&str, &str, &str, &[u8]); 2] =
        [("files[0]", "a", "image/png", &image), ("files[1]", "b", "text/csv", b"x,y\n1,2\n")];
    let (status, created) = upload(&discord, form(Some(payload), &files)).await;
    assert_eq!(status, 200, "{created}");
    assert_eq!(created["content"], "two files");
    let attachments = created["attachments"].as_array().unwrap();
    assert_eq!(attachments.len(), 2);
    assert_eq!((attachments[0]["filename"].as_str(), attachments[0]["width"].as_u64()), (Some("chart.png"), Some(2)));
    assert_eq!((attachments[1]["content_type"].as_str(), attachments[1]["size"].as_u64()), (Some("text/csv"), Some(8)));
    assert_eq!(fetch(attachments[0]["url"].as_str().unwrap()).await.3, image, "the bot's upload is on the CDN");

    let shown = discord.messages_in(10);
    let names: Vec<_> = shown[0].attachments.iter().map(|file| file.filename.as_str()).collect();
    assert_eq!(names, ["chart.png", "data.csv"]);
    assert_eq!(shown[0].attachments[1].bytes, b"x,y\n1,2\n");
    let call = discord.calls().into_iter().rfind(|call| call.is_create_message()).unwrap();
    assert_eq!(
        (call.body["nonce"].as_str(), call.files.len(), call.files[0].filename.as_deref()),
        (Some("n1"), 2, Some("a"))
    );

    // The same nonce again: the message already created, nothing new.
    let (status, again) = upload(&discord, form(Some(payload), &files)).await;
    assert_eq!((status, &again["id"]), (200, &created["id"]));
    assert_eq!((discord.messages_in(10).len(), discord.nonce_replays().len()), (1, 1));
}

#[tokio::test]
async fn uploads_are_refused_as_discord_refuses_them() {
    let discord = fake().await;
    discord.add_guild_channel(1, 10);
    let one: [(&str, &str, &str, &[u8]); 1] = [("files[0]", "a.txt", "text/plain", b"a")];
    let code = |body: &Value| body["code"].as_i64();

    let (status, body) = upload(&discord, form(Some("{not json"), &one)).await;
    assert_eq!((status, code(&body)), (400, Some(50109)));
    let dangling = r#"{"attachments": [{"id": 3, "filename": "x"}]}"#;
    let (status, body) = upload(&discord, form(Some(dangling), &one)).await;
    assert_eq!((status, code(&body)), (400, Some(50035)));
    assert!(body["errors"]["attachments"]["0"].is_object(), "{body}");
    let (status, body) = upload(&discord, form(Some(r#"{"content": ""}"#), &[])).await;
    assert_eq!((status, code(&body)), (400, Some(50006)), "no files, no content");
    let long = json!({ "content": "x".repeat(2001) }).to_string();
    assert_eq!(upload(&discord, form(Some(&long), &one)).await.0, 400);

    let big = vec![0u8; DISCORD_UPLOAD_LIMIT + 1];
    let (status, body) =
        upload(&discord, form(Some("{}"), &[("files[0]", "big.bin", "application/octet-stream", &big)])).await;
    assert_eq!((status, body), (413, json!({"message": "Request entity too large", "code": 40005})));
    let eleven: Vec<(&str, &str, &str, &[u8])> =
        (0..11).map(|_| ("files[0]", "a", "text/plain", b"a".as_slice())).collect();
    assert_eq!(upload(&discord, form(Some("{}"), &eleven)).await.0, 400);

    // Scripted faults hit multipart creates like any other.
    discord.fail_next_with_429(10, Duration::from_millis(750));
    let (status, body) = upload(&discord, form(Some("{}"), &one)).await;
    assert_eq!((status, body["retry_after"].as_f64()), (429, Some(0.75)));
    assert!(discord.messages_in(10).is_empty());
    let (status, _) = upload(&discord, form(Some("{}"), &one)).await;
    assert_eq!(status, 200, "a file alone is a message");
}
