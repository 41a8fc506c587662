//! Image parts: both fakes take the shapes their API takes, refuse what it refuses, and
//! report what they received.

use std::io::Cursor;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use ferry_fakes::{FakeOpenAi, ReceivedImage, Turn};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::anthropic;
use crate::soon;

/// A `width`×`height` PNG, base64.
fn png(width: u32, height: u32) -> String {
    let mut bytes = Cursor::new(Vec::new());
    image::RgbImage::new(width, height).write_to(&mut bytes, image::ImageFormat::Png).expect("encode a PNG");
    BASE64.encode(bytes.into_inner())
}

fn anthropic_body(image: Value) -> Value {
    json!({
        "model": "claude-test",
        "max_tokens": 1024,
        "stream": false,
        "messages": [
            { "role": "user", "content": "look" },
            { "role": "assistant", "content": [{ "type": "tool_use", "id": "t1", "name": "read", "input": {} }] },
            { "role": "user", "content": [{ "type": "tool_result", "tool_use_id": "t1", "content": [
                { "type": "text", "text": "a.png" },
                image,
            ]}]},
        ],
    })
}

fn anthropic_image(media_type: &str, data: &str) -> Value {
    json!({ "type": "image", "source": { "type": "base64", "media_type": media_type, "data": data } })
}

async fn anthropic_error(body: &Value) -> String {
    let fake = anthropic::start().await;
    let response = anthropic::post(&fake, body).await;
    let error = anthropic::error_body(response, StatusCode::BAD_REQUEST).await;
    assert_eq!(error["error"]["type"], "invalid_request_error");
    error["error"]["message"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn anthropic_takes_an_image_inside_a_tool_result_and_reports_it() {
    let fake = anthropic::start().await;
    fake.push(Turn::text(["I see it."]));
    let data = png(40, 30);
    let response = anthropic::post(&fake, &anthropic_body(anthropic_image("image/png", &data))).await;
    assert_eq!(response.status(), StatusCode::OK);
    let images = fake.requests()[0].images();
    assert_eq!(
        images,
        [ReceivedImage {
            role: "user".into(),
            media_type: "image/png".into(),
            base64_len: data.len(),
            byte_len: BASE64.decode(&data).unwrap().len(),
            pixels: Some((40, 30)),
            tool_use_id: Some("t1".into()),
            caption: Some("a.png".into()),
        }]
    );
}

#[tokio::test]
async fn anthropic_refuses_images_the_api_refuses() {
    let path = "messages.2.content.0.content.1";
    let message = anthropic_error(&anthropic_body(anthropic_image("image/png", "%%%"))).await;
    assert_eq!(message, format!("{path}.source.base64: invalid base64 data"));

    let message = anthropic_error(&anthropic_body(anthropic_image("image/jpeg", &png(4, 4)))).await;
    assert_eq!(message, format!("{path}.source.base64: Image does not match the provided media type image/jpeg"));

    let message = anthropic_error(&anthropic_body(anthropic_image("image/png", &BASE64.encode("hello")))).await;
    assert_eq!(message, format!("{path}.source.base64: Could not process image"));

    let message = anthropic_error(&anthropic_body(anthropic_image("image/png", &png(8001, 1)))).await;
    assert!(
        message.ends_with("At least one of the image dimensions exceed max allowed size: 8000 pixels"),
        "{message}"
    );

    let huge = "A".repeat(ferry_fakes::IMAGE_BASE64_LIMIT + 4);
    let message = anthropic_error(&anthropic_body(anthropic_image("image/png", &huge))).await;
    assert_eq!(message, format!("{path}.source.base64: image exceeds 5 MB maximum: 5242884 bytes > 5242880 bytes"));

    let message = anthropic_error(&anthropic_body(json!({ "type": "text", "text": "" }))).await;
    assert_eq!(message, "messages: text content blocks must be non-empty");
}

async fn openai_post(fake: &FakeOpenAi, messages: Value) -> reqwest::Response {
    let body = json!({ "model": "gpt-test", "stream": false, "messages": messages });
    soon(reqwest::Client::new().post(format!("{}/chat/completions", fake.url())).json(&body).send())
        .await
        .expect("send request")
}

async fn openai_error(messages: Value) -> Value {
    let fake = FakeOpenAi::start().await.expect("start fake OpenAI");
    let response = openai_post(&fake, messages).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.expect("an error body");
    body["error"].clone()
}

fn tool_round(tool_content: Value) -> Vec<Value> {
    vec![
        json!({ "role": "user", "content": "look" }),
        json!({ "role": "assistant", "content": null, "tool_calls": [
            { "id": "c1", "type": "function", "function": { "name": "read", "arguments": "{}" } },
        ]}),
        json!({ "role": "tool", "tool_call_id": "c1", "content": tool_content }),
    ]
}

fn openai_image(url: &str) -> Value {
    json!({ "type": "image_url", "image_url": { "url": url } })
}

#[tokio::test]
async fn openai_takes_tool_images_in_a_user_message_after_the_tool_messages_and_reports_them() {
    let fake = FakeOpenAi::start().await.expect("start fake OpenAI");
    fake.push(Turn::text(["I see it."]));
    let data = png(16, 9);
    let mut messages = tool_round(json!("a.png"));
    messages.push(json!({ "role": "user", "content": [
        { "type": "text", "text": "Images returned by tool read (call c1):" },
        openai_image(&format!("data:image/png;base64,{data}")),
    ]}));
    let response = openai_post(&fake, Value::Array(messages)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let images = fake.requests()[0].images();
    assert_eq!(images.len(), 1);
    assert_eq!((images[0].media_type.as_str(), images[0].pixels), ("image/png", Some((16, 9))));
    assert_eq!(images[0].caption.as_deref(), Some("Images returned by tool read (call c1):"));
    assert_eq!(images[0].tool_use_id, None);
}

#[tokio::test]
async fn openai_refuses_images_outside_user_messages_and_anything_between_tool_messages() {
    let url = format!("data:image/png;base64,{}", png(4, 4));
    let error = openai_error(Value::Array(tool_round(json!([openai_image(&url)])))).await;
    assert!(error["message"].as_str().unwrap().contains("Image URLs are only allowed for messages with role 'user'"));

    // A second call whose result comes after a user message: the API wants the results together.
    let mut messages = tool_round(json!("a.png"));
    messages[1]["tool_calls"]
        .as_array_mut()
        .unwrap()
        .push(json!({ "id": "c2", "type": "function", "function": { "name": "read", "arguments": "{}" } }));
    messages.push(json!({ "role": "user", "content": [openai_image(&url)] }));
    messages.push(json!({ "role": "tool", "tool_call_id": "c2", "content": "b.png" }));
    let error = openai_error(Value::Array(messages)).await;
    assert_eq!(error["param"], "messages.[4].role");
    assert!(
        error["message"].as_str().unwrap().contains("must be a response to a preceeding message with 'tool_calls'")
    );

    let not_an_image = format!("data:image/png;base64,{}", BASE64.encode("hello"));
    let error = openai_error(json!([{ "role": "user", "content": [openai_image(&not_an_image)] }])).await;
    assert_eq!(error["code"], "invalid_image_format");
    assert_eq!(error["param"], "messages[0].content[0]");

    let error = openai_error(json!([{ "role": "user", "content": [openai_image("data:image/png,raw")] }])).await;
    assert_eq!(error["code"], "invalid_value");
}
