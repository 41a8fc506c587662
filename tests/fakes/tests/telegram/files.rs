//! Files on the fake Telegram: `getFile` and the download route, multipart uploads through
//! every `send<Media>` method with Telegram's limits and error texts, and teloxide reading
//! the media messages and sending files itself.

use std::time::Duration;

use ferry_fakes::{
    DOWNLOAD_LIMIT, FakeTelegram, PHOTO_UPLOAD_LIMIT, StickerFormat, TgMedia, TgUser, UPLOAD_LIMIT, sample_jpeg,
};
use serde_json::{Value, json};
use teloxide_core::prelude::*;
use teloxide_core::types::{FileId, InputFile, Message, ParseMode, UpdateKind};

use crate::{TOKEN, fails, fake, ok};

const ADA: i64 = 42;

fn ada() -> TgUser {
    TgUser::new(ADA, "Ada")
}

/// A `multipart/form-data` body written out by hand, so the test shows the wire format: text
/// fields, then files as `(part name, file name, bytes)`.
fn multipart(fields: &[(&str, &str)], files: &[(&str, &str, &[u8])]) -> (String, Vec<u8>) {
    const BOUNDARY: &str = "ferry-boundary-7MA4YWxk";
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend_from_slice(
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n").as_bytes(),
        );
    }
    for (name, file_name, bytes) in files {
        let head = format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{file_name}\"\r\n\
             Content-Type: application/octet-stream\r\n\r\n"
        );
        body.extend_from_slice(head.as_bytes());
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={BOUNDARY}"), body)
}

/// POSTs a multipart body to a method; the status and the parsed answer.
async fn upload(
    telegram: &FakeTelegram,
    method: &str,
    fields: &[(&str, &str)],
    files: &[(&str, &str, &[u8])],
) -> (u16, Value) {
    let (content_type, body) = multipart(fields, files);
    let url = format!("{}/bot{TOKEN}/{method}", telegram.url());
    let response =
        reqwest::Client::new().post(url).header("content-type", content_type).body(body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// GETs a file path; the status, `Content-Length` and body.
async fn fetch(telegram: &FakeTelegram, token: &str, path: &str) -> (u16, Option<u64>, Vec<u8>) {
    let response = reqwest::get(format!("{}/file/bot{token}/{path}", telegram.url())).await.unwrap();
    let status = response.status().as_u16();
    let length = response.content_length();
    (status, length, response.bytes().await.unwrap().to_vec())
}

#[tokio::test]
async fn get_file_answers_the_file_object_and_the_path_serves_the_bytes() {
    let telegram = fake().await;
    let bytes = b"%PDF-1.4 hello".to_vec();
    let document =
        TgMedia::Document { file_name: "a.pdf".into(), mime_type: "application/pdf".into(), bytes: bytes.clone() };
    let injected = telegram.media_message(ADA, ada(), document, Some("see"));
    let file = &injected.files[0];
    let result = ok(&telegram, "getFile", json!({ "file_id": file.file_id })).await;
    assert_eq!(
        result,
        json!({ "file_id": file.file_id, "file_unique_id": file.file_unique_id, "file_size": bytes.len(), "file_path": file.file_path })
    );
    assert!(file.file_path.starts_with("documents/") && file.file_path.ends_with(".pdf"), "{}", file.file_path);

    let (status, length, body) = fetch(&telegram, TOKEN, &file.file_path).await;
    assert_eq!((status, length, body), (200, Some(bytes.len() as u64), bytes));
    assert_eq!(telegram.calls_to("file")[0].params["file_path"], file.file_path.as_str());

    // A wrong token, or a path that is not a file, is a 404 as on Telegram.
    assert_eq!(fetch(&telegram, "123456:WRONG", &file.file_path).await.0, 404);
    assert_eq!(fetch(&telegram, TOKEN, "documents/nothing.pdf").await.0, 404);
    assert_eq!(fails(&telegram, "getFile", json!({ "file_id": "nope" }), 400).await, "Bad Request: invalid file_id");
}

#[tokio::test]
async fn get_file_refuses_files_over_twenty_megabytes() {
    let telegram = fake().await;
    let big = vec![7u8; DOWNLOAD_LIMIT as usize + 1];
    let document =
        TgMedia::Document { file_name: "big.bin".into(), mime_type: "application/octet-stream".into(), bytes: big };
    let file = telegram.media_message(ADA, ada(), document, None).files.remove(0);
    let description = fails(&telegram, "getFile", json!({ "file_id": file.file_id }), 400).await;
    assert_eq!(description, "Bad Request: file is too big");
}

#[tokio::test]
async fn media_messages_read_as_teloxide_messages() {
    let telegram = fake().await;
    let bot = Bot::new(TOKEN).set_api_url(telegram.url().parse().unwrap());
    telegram.media_message(ADA, ada(), TgMedia::Photo(vec![(90, 60), (800, 533)]), Some("photo @ferry_test_bot"));
    telegram.media_message(ADA, ada(), TgMedia::Voice { bytes: b"OggS".to_vec(), duration: 2 }, None);
    telegram.media_message(
        ADA,
        ada(),
        TgMedia::Sticker { format: StickerFormat::Video, bytes: b"webm".to_vec() },
        None,
    );
    let media = TgMedia::Audio { file_name: "song.mp3".into(), mime_type: "audio/mpeg".into(), bytes: b"ID3".to_vec() };
    telegram.media_message(ADA, ada(), media, None);
    telegram.media_message(ADA, ada(), TgMedia::Video { width: 640, height: 360, bytes: b"mp4".to_vec() }, None);
    telegram.media_message(ADA, ada(), TgMedia::VideoNote { length: 240, bytes: b"mp4".to_vec() }, None);

    let updates = bot.get_updates().await.unwrap();
    let messages: Vec<&Message> = updates
        .iter()
        .map(|update| match &update.kind {
            UpdateKind::Message(message) => message,
            other => panic!("{other:?}"),
        })
        .collect();
    let photo = messages[0].photo().expect("a photo");
    assert_eq!(photo.iter().map(|size| (size.width, size.height)).collect::<Vec<_>>(), [(90, 60), (800, 533)]);
    assert_eq!(messages[0].caption(), Some("photo @ferry_test_bot"));
    assert_eq!(
        messages[1].voice().and_then(|voice| voice.mime_type.as_ref()).map(ToString::to_string).as_deref(),
        Some("audio/ogg")
    );
    assert!(messages[2].sticker().expect("a sticker").is_video());
    assert!(messages[3].audio().is_some() && messages[4].video().is_some() && messages[5].video_note().is_some());

    // Every size of the photo is a file of its own, with the pixels it claims.
    let file = bot.get_file(FileId(photo[1].file.id.to_string())).await.unwrap();
    let (_, _, bytes) = fetch(&telegram, TOKEN, &file.path).await;
    assert_eq!(bytes.len() as u32, photo[1].file.size);
}

#[tokio::test]
async fn multipart_uploads_are_recorded_with_their_file_and_answer_a_message() {
    let telegram = fake().await;
    telegram.private_message(ADA, "Ada", "hi");
    let jpeg = sample_jpeg(320, 200);
    // A part named after the field, as curl -F photo=@cat.jpg sends it.
    let (status, answer) = upload(
        &telegram,
        "sendPhoto",
        &[("chat_id", "42"), ("caption", "<b>cat</b>"), ("parse_mode", "HTML")],
        &[("photo", "cat.jpg", &jpeg)],
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let message = &answer["result"];
    assert_eq!(message["photo"][0]["width"], 320);
    assert_eq!(message["caption"], "cat");
    assert_eq!(message["caption_entities"], json!([{ "type": "bold", "offset": 0, "length": 3 }]));

    // A part named by attach://, as teloxide sends it.
    let (status, answer) = upload(
        &telegram,
        "sendDocument",
        &[("chat_id", "42"), ("document", "attach://f1")],
        &[("f1", "notes.txt", b"some notes")],
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["result"]["document"]["file_name"], "notes.txt");
    assert_eq!(answer["result"]["document"]["mime_type"], "text/plain");

    let (status, answer) = upload(&telegram, "sendVoice", &[("chat_id", "42")], &[("voice", "v.ogg", b"OggS")]).await;
    assert_eq!((status, &answer["result"]["voice"]["mime_type"]), (200, &json!("audio/ogg")));

    let sent = telegram.sent();
    let media: Vec<_> = sent.iter().map(|message| message.media.clone().expect("a file")).collect();
    assert_eq!(media.iter().map(|m| m.method.as_str()).collect::<Vec<_>>(), ["sendPhoto", "sendDocument", "sendVoice"]);
    assert_eq!((&media[0].bytes[..], media[0].dimensions), (&jpeg[..], Some((320, 200))));
    assert_eq!((sent[0].text.as_str(), sent[0].visible_text.as_str()), ("<b>cat</b>", "cat"));

    // The bot's files are files like any other.
    let path = &media[1].file.file_path;
    assert_eq!(fetch(&telegram, TOKEN, path).await.2, b"some notes");
}

#[tokio::test]
async fn uploads_keep_to_telegrams_limits_with_its_error_texts() {
    let telegram = fake().await;
    telegram.private_message(ADA, "Ada", "hi");
    let chat = [("chat_id", "42")];
    let refused =
        |(status, answer): (u16, Value)| (status, answer["description"].as_str().unwrap_or_default().to_owned());

    let strip = sample_jpeg(2100, 100);
    let answer = upload(&telegram, "sendPhoto", &chat, &[("photo", "strip.jpg", &strip)]).await;
    assert_eq!(refused(answer), (400, "Bad Request: PHOTO_INVALID_DIMENSIONS".to_owned()));
    let answer = upload(&telegram, "sendPhoto", &chat, &[("photo", "x.jpg", b"not an image")]).await;
    assert_eq!(refused(answer), (400, "Bad Request: IMAGE_PROCESS_FAILED".to_owned()));
    let huge_photo = vec![0u8; PHOTO_UPLOAD_LIMIT as usize + 1];
    let answer = upload(&telegram, "sendPhoto", &chat, &[("photo", "big.jpg", &huge_photo)]).await;
    assert_eq!(refused(answer), (400, "Bad Request: PHOTO_SAVE_FILE_INVALID".to_owned()));

    let caption = "x".repeat(1025);
    let answer =
        upload(&telegram, "sendDocument", &[("chat_id", "42"), ("caption", &caption)], &[("document", "a.txt", b"a")])
            .await;
    assert_eq!(refused(answer), (400, "Bad Request: message caption is too long".to_owned()));
    // The limit counts what is shown: markup does not count.
    let styled = format!("<b>{}</b>", "x".repeat(1024));
    let fields = [("chat_id", "42"), ("caption", styled.as_str()), ("parse_mode", "HTML")];
    assert_eq!(upload(&telegram, "sendDocument", &fields, &[("document", "a.txt", b"a")]).await.0, 200);
    let fields = [("chat_id", "42"), ("caption", "<b>open"), ("parse_mode", "HTML")];
    let (status, description) =
        refused(upload(&telegram, "sendDocument", &fields, &[("document", "a.txt", b"a")]).await);
    assert!(status == 400 && description.starts_with("Bad Request: can't parse entities"), "{description}");

    let huge = vec![0u8; UPLOAD_LIMIT as usize + 1];
    let answer = upload(&telegram, "sendDocument", &chat, &[("document", "huge.bin", &huge)]).await;
    assert_eq!(refused(answer), (413, "Request Entity Too Large".to_owned()));
    let answer = upload(&telegram, "sendDocument", &chat, &[]).await;
    assert_eq!(refused(answer), (400, "Bad Request: there is no document in the request".to_owned()));
    assert_eq!(telegram.sent().len(), 1, "only the one within the limits was sent");
}

#[tokio::test]
async fn faults_and_flood_control_apply_to_uploads_and_downloads() {
    let telegram = fake().await.with_rate_limits(ferry_fakes::RateLimits::telegram());
    telegram.private_message(ADA, "Ada", "hi");
    let storm_end = telegram.rate_limit_storm("sendPhoto", Duration::from_secs(30), 3);
    let photo = sample_jpeg(32, 32);
    let (status, answer) = upload(&telegram, "sendPhoto", &[("chat_id", "42")], &[("photo", "a.jpg", &photo)]).await;
    assert_eq!((status, &answer["parameters"]["retry_after"]), (429, &json!(3)));
    assert!(storm_end > tokio::time::Instant::now());

    telegram.drop_next_connection("sendDocument");
    let (content_type, body) = multipart(&[("chat_id", "42")], &[("document", "a.txt", b"a")]);
    let url = format!("{}/bot{TOKEN}/sendDocument", telegram.url());
    let sent = reqwest::Client::new().post(url).header("content-type", content_type).body(body).send().await;
    let broken = match sent {
        Err(_) => true,
        Ok(response) => response.bytes().await.is_err(),
    };
    assert!(broken, "the connection closes without an answer");

    let file = telegram
        .media_message(ADA, ada(), TgMedia::Voice { bytes: b"OggS".to_vec(), duration: 1 }, None)
        .files
        .remove(0);
    telegram.fail_next("file", 502, "Bad Gateway");
    assert_eq!(fetch(&telegram, TOKEN, &file.file_path).await.0, 502);
    assert_eq!(fetch(&telegram, TOKEN, &file.file_path).await.0, 200);
}

#[tokio::test]
async fn a_teloxide_bot_uploads_files_and_fetches_them_back() {
    let telegram = fake().await;
    telegram.private_message(ADA, "Ada", "hi");
    let bot = Bot::new(TOKEN).set_api_url(telegram.url().parse().unwrap());
    let jpeg = sample_jpeg(100, 80);
    let sent = bot
        .send_photo(ChatId(ADA), InputFile::memory(jpeg.clone()).file_name("p.jpg"))
        .caption("<i>hi</i>")
        .parse_mode(ParseMode::Html)
        .await
        .unwrap();
    assert_eq!(sent.caption(), Some("hi"));
    let size = sent.photo().and_then(|sizes| sizes.last()).expect("a photo").clone();
    assert_eq!((size.width, size.height), (100, 80));
    let file = bot.get_file(size.file.id.clone()).await.unwrap();
    assert_eq!(fetch(&telegram, TOKEN, &file.path).await.2, jpeg);

    let sent = bot.send_document(ChatId(ADA), InputFile::memory(b"doc".to_vec()).file_name("d.md")).await.unwrap();
    assert_eq!(sent.document().and_then(|d| d.file_name.as_deref()), Some("d.md"));
    let media = telegram.sent().pop().and_then(|message| message.media).expect("a file");
    assert_eq!((media.method.as_str(), media.mime_type.as_str()), ("sendDocument", "text/markdown"));
}
