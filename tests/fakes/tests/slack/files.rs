//! The fake Slack's files: users' files served only with the bot token, the external
//! upload flow in Slack's shapes (parsed with slack-morphism's own types), and the retired
//! `files.upload`.

use ferry_fakes::{FakeSlack, SLACK_LOGIN_PAGE};
use serde_json::{Value, json};
use slack_morphism::api::{SlackApiFilesCompleteUploadExternalResponse, SlackApiFilesGetUploadUrlExternalResponse};
use slack_morphism::events::{SlackEventCallbackBody, SlackMessageEventType, SlackPushEventCallback};

use crate::{call, call_with};

async fn get(url: &str, token: Option<&str>) -> (u16, Option<String>, Vec<u8>) {
    let mut request = reqwest::Client::new().get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let content_type = response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned());
    (status, content_type, response.bytes().await.unwrap().to_vec())
}

#[tokio::test]
async fn a_users_file_is_served_only_with_the_bot_token_and_otherwise_the_sign_in_page() {
    let slack = FakeSlack::start().await.unwrap();
    let file = slack.user_file("U1", "cat photo.png", "image/png", b"PNGDATA".to_vec(), Some((40, 30)));
    assert_eq!(
        (file["size"].as_u64(), file["original_w"].as_u64(), file["original_h"].as_u64()),
        (Some(7), Some(40), Some(30))
    );
    let download = file["url_private_download"].as_str().unwrap();
    assert!(download.starts_with(&slack.url()) && download.ends_with("/download/cat%20photo.png"), "{download}");
    for url in [download, file["url_private"].as_str().unwrap()] {
        let (status, content_type, body) = get(url, Some(FakeSlack::BOT_TOKEN)).await;
        assert_eq!((status, content_type.as_deref(), body.as_slice()), (200, Some("image/png"), b"PNGDATA".as_slice()));
    }
    for token in [None, Some("xoxb-wrong"), Some(FakeSlack::APP_TOKEN)] {
        let (status, content_type, body) = get(download, token).await;
        assert_eq!((status, content_type.as_deref()), (200, Some("text/html; charset=utf-8")), "{token:?}");
        assert_eq!(body, SLACK_LOGIN_PAGE.as_bytes());
    }
    let tokens: Vec<Value> =
        slack.calls_to(FakeSlack::DOWNLOAD_ROUTE).iter().map(|c| c.params["token"].clone()).collect();
    assert_eq!(tokens[0], FakeSlack::BOT_TOKEN);
    assert_eq!(tokens[2], Value::Null);
}

#[tokio::test]
async fn a_file_share_event_parses_as_slack_morphisms_file_share_message() {
    let slack = FakeSlack::start().await.unwrap();
    let file = slack.user_file("U1", "a.pdf", "application/pdf", b"%PDF".to_vec(), None);
    let event = slack.file_share("C1", "channel", "U1", "see attached", vec![file]);
    let callback: SlackPushEventCallback = serde_json::from_value(event.payload).unwrap();
    let SlackEventCallbackBody::Message(message) = callback.event else { panic!("not a message") };
    assert_eq!(message.subtype, Some(SlackMessageEventType::FileShare));
    let files = message.content.and_then(|content| content.files).unwrap();
    assert_eq!((files[0].name.as_deref(), files[0].url_private_download.is_some()), (Some("a.pdf"), true));
}

/// POSTs `body` to an upload URL with `content_type`; the status and text answered.
async fn post_bytes(url: &str, content_type: &str, body: Vec<u8>) -> (u16, String) {
    let response =
        reqwest::Client::new().post(url).header("content-type", content_type).body(body).send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test]
async fn the_external_upload_flow_shares_the_file_and_answers_slacks_shapes() {
    let slack = FakeSlack::start().await.unwrap();
    let target = call(&slack, "files.getUploadURLExternal", json!({"filename": "r.csv", "length": 5})).await;
    let parsed: SlackApiFilesGetUploadUrlExternalResponse = serde_json::from_value(target.clone()).unwrap();
    let upload_url = parsed.upload_url.0.to_string();
    assert!(upload_url.starts_with(&slack.url()), "{upload_url}");
    // Not shared before the bytes arrive.
    let early =
        call(&slack, "files.completeUploadExternal", json!({"files": [{"id": parsed.file_id.0}], "channel_id": "C1"}))
            .await;
    assert_eq!(early["error"], "file_not_found");
    assert_eq!(post_bytes(&upload_url, "text/csv", b"a,b\n1".to_vec()).await, (200, "OK - 5".to_owned()));

    // Form-encoded, as most SDKs send it: `files` is a JSON string.
    let form = [
        ("files", format!("[{{\"id\":\"{}\",\"title\":\"Report\"}}]", parsed.file_id.0)),
        ("channel_id", "C1".to_owned()),
        ("thread_ts", "1700000000.000001".to_owned()),
        ("initial_comment", "the *report*".to_owned()),
    ];
    let answer: Value = reqwest::Client::new()
        .post(format!("{}/files.completeUploadExternal", slack.api_url()))
        .bearer_auth(FakeSlack::BOT_TOKEN)
        .form(&form)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let _: SlackApiFilesCompleteUploadExternalResponse = serde_json::from_value(answer.clone()).unwrap();
    let file = &answer["files"][0];
    assert_eq!((file["id"].as_str(), file["title"].as_str()), (Some(parsed.file_id.0.as_str()), Some("Report")));
    let share = &file["shares"]["public"]["C1"][0];
    assert_eq!(share["thread_ts"], "1700000000.000001");

    let [uploaded]: [_; 1] = slack.uploaded_files().try_into().unwrap();
    assert_eq!((uploaded.bytes.as_slice(), uploaded.mimetype.as_deref()), (b"a,b\n1".as_slice(), Some("text/csv")));
    assert_eq!(
        (uploaded.comment.as_deref(), uploaded.ts.as_ref()),
        (Some("the *report*"), share["ts"].as_str().map(str::to_owned).as_ref())
    );
    let shown = slack.messages_in("C1");
    assert_eq!((shown[0].text.as_str(), shown[0].files.clone()), ("the *report*", vec![uploaded.id.clone()]));
    let info = call(&slack, "files.info", json!({"file": uploaded.id})).await;
    assert_eq!(info["file"]["shares"], file["shares"]);
    assert_eq!(call(&slack, "files.delete", json!({"file": uploaded.id})).await["ok"], true);
    assert!(slack.messages_in("C1").is_empty() && slack.uploaded_files().is_empty());
}

/// An upload never completed, once expired, is unknown to `files.completeUploadExternal`
/// and `files.info`.
#[tokio::test]
async fn an_expired_upload_is_file_not_found() {
    let slack = FakeSlack::start().await.unwrap();
    let target = call(&slack, "files.getUploadURLExternal", json!({"filename": "r.csv", "length": 5})).await;
    let parsed: SlackApiFilesGetUploadUrlExternalResponse = serde_json::from_value(target).unwrap();
    assert_eq!(post_bytes(parsed.upload_url.0.as_str(), "text/csv", b"a,b\n1".to_vec()).await.0, 200);
    slack.expire_pending_uploads();
    let files = json!([{"id": parsed.file_id.0}]);
    let shared = call(&slack, "files.completeUploadExternal", json!({"files": files, "channel_id": "C1"})).await;
    assert_eq!(shared["error"], "file_not_found");
    assert_eq!(call(&slack, "files.info", json!({"file": parsed.file_id.0})).await["error"], "file_not_found");
    assert!(slack.uploaded_files().is_empty());
}

#[tokio::test]
async fn uploads_check_their_arguments_and_length_and_take_multipart_forms() {
    let slack = FakeSlack::start().await.unwrap();
    for bad in [json!({"length": 5}), json!({"filename": "a", "length": 0}), json!({"filename": "a"})] {
        assert_eq!(call(&slack, "files.getUploadURLExternal", bad).await["error"], "invalid_arguments");
    }
    let target = call(&slack, "files.getUploadURLExternal", json!({"filename": "a.png", "length": 4})).await;
    let url = target["upload_url"].as_str().unwrap();
    assert_eq!(post_bytes(url, "image/png", b"12345".to_vec()).await.0, 400, "length mismatch");
    let form = b"--B\r\nContent-Disposition: form-data; name=\"filename\"; filename=\"a.png\"\r\n\
                 Content-Type: image/png\r\n\r\nPNG!\r\n--B--\r\n"
        .to_vec();
    assert_eq!(post_bytes(url, "multipart/form-data; boundary=B", form).await, (200, "OK - 4".to_owned()));
    let done =
        call(&slack, "files.completeUploadExternal", json!({"files": [{"id": target["file_id"]}], "channel_id": "D1"}))
            .await;
    assert!(done["files"][0]["shares"]["private"]["D1"].is_array(), "{done}");
    assert_eq!(slack.uploaded_files()[0].bytes, b"PNG!");
}

#[tokio::test]
async fn files_upload_is_retired_and_faults_apply_to_the_file_methods() {
    let slack = FakeSlack::start().await.unwrap();
    let retired = call(&slack, "files.upload", json!({"channels": "C1", "content": "x"})).await;
    assert_eq!(retired, json!({"ok": false, "error": "method_deprecated"}));
    slack.rate_limit_next("files.getUploadURLExternal", 1, 2);
    let (status, retry_after, _) =
        call_with(&slack, FakeSlack::BOT_TOKEN, "files.getUploadURLExternal", json!({"filename": "a", "length": 1}))
            .await;
    assert_eq!((status, retry_after.as_deref()), (429, Some("2")));
    let target = call(&slack, "files.getUploadURLExternal", json!({"filename": "a", "length": 1})).await;
    slack.rate_limit_next(FakeSlack::UPLOAD_ROUTE, 1, 3);
    let url = target["upload_url"].as_str().unwrap();
    assert_eq!(post_bytes(url, "text/plain", b"x".to_vec()).await.0, 429);
    slack.drop_next_before_apply(FakeSlack::UPLOAD_ROUTE);
    let lost = match reqwest::Client::new().post(url).body("x").send().await {
        Ok(response) => response.bytes().await.is_err(),
        Err(_) => true,
    };
    assert!(lost, "the connection closes without an answer");
    assert_eq!(post_bytes(url, "text/plain", b"x".to_vec()).await.0, 200);
}
