//! What "send exactly once" needs from the fake Discord: `nonce` + `enforce_nonce`
//! deduplication, calls that take effect but lose their answer (or are lost before), and
//! 429 storms that outlast the `retry_after` they announce.

use std::time::Duration;

use ferry_fakes::{DiscordDropped, DiscordNonceReplay, FakeDiscord};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::{TOKEN, call, fake};

/// Sends one REST call and reads the whole answer; `Err` when the connection broke.
async fn try_call(discord: &FakeDiscord, method: Method, path: &str, body: Option<Value>) -> reqwest::Result<u16> {
    let mut request = reqwest::Client::new()
        .request(method, format!("{}/api/v10{path}", discord.url()))
        .header("Authorization", format!("Bot {TOKEN}"));
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    response.bytes().await?;
    Ok(status)
}

fn contents(discord: &FakeDiscord, channel: u64) -> Vec<String> {
    discord.messages_in(channel).into_iter().map(|message| message.content).collect()
}

#[tokio::test]
async fn a_repeated_nonce_with_enforce_nonce_is_answered_with_the_existing_message_and_creates_nothing() {
    let discord = fake().await;
    discord.add_guild_channel(1, 10);
    discord.add_guild_channel(1, 20);
    let create = json!({"content": "answer", "nonce": "abc123", "enforce_nonce": true});
    let (status, first, _) = call(&discord, Method::POST, "/channels/10/messages", Some(create.clone()), TOKEN).await;
    assert_eq!((status, first["nonce"].as_str()), (200, Some("abc123")), "the nonce is echoed");
    let (status, again, _) = call(&discord, Method::POST, "/channels/10/messages", Some(create.clone()), TOKEN).await;
    assert_eq!(status, 200);
    assert_eq!(again, first, "the very message created before");
    assert_eq!(contents(&discord, 10), ["answer"]);
    let id: u64 = first["id"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        discord.nonce_replays(),
        [DiscordNonceReplay { channel_id: 10, nonce: "abc123".into(), message_id: id }]
    );

    // The same nonce in another channel, or without enforce_nonce, is a new message.
    assert_eq!(call(&discord, Method::POST, "/channels/20/messages", Some(create), TOKEN).await.0, 200);
    let unenforced = json!({"content": "answer", "nonce": "abc123"});
    assert_eq!(call(&discord, Method::POST, "/channels/10/messages", Some(unenforced), TOKEN).await.0, 200);
    assert_eq!((contents(&discord, 10).len(), contents(&discord, 20).len()), (2, 1));
    assert_eq!(discord.nonce_replays().len(), 1);
}

#[tokio::test]
async fn a_nonce_longer_than_25_characters_is_refused_with_invalid_form_body() {
    let discord = fake().await;
    discord.add_guild_channel(1, 10);
    let long = json!({"content": "x", "nonce": "n".repeat(26), "enforce_nonce": true});
    let (status, body, _) = call(&discord, Method::POST, "/channels/10/messages", Some(long), TOKEN).await;
    assert_eq!((status, body["code"].as_i64()), (400, Some(50035)));
    assert_eq!(body["errors"]["nonce"]["_errors"][0]["code"], "BASE_TYPE_MAX_LENGTH");
    let exact = json!({"content": "x", "nonce": "n".repeat(25), "enforce_nonce": true});
    assert_eq!(call(&discord, Method::POST, "/channels/10/messages", Some(exact), TOKEN).await.0, 200);
}

#[tokio::test]
async fn apply_then_drop_creates_edits_and_deletes_but_the_client_gets_a_connection_error() {
    let discord = fake().await;
    discord.add_guild_channel(1, 10);
    discord.apply_then_drop_next(10);
    let create = json!({"content": "landed", "nonce": "n1", "enforce_nonce": true});
    assert!(try_call(&discord, Method::POST, "/channels/10/messages", Some(create.clone())).await.is_err());
    let shown = discord.messages_in(10);
    assert_eq!(contents(&discord, 10), ["landed"], "the message exists");
    // A retry with the same nonce finds it instead of creating a second one.
    let (status, retried, _) = call(&discord, Method::POST, "/channels/10/messages", Some(create), TOKEN).await;
    assert_eq!((status, retried["id"].as_str()), (200, Some(shown[0].message_id.to_string().as_str())));
    assert_eq!(contents(&discord, 10), ["landed"]);

    let path = format!("/channels/10/messages/{}", shown[0].message_id);
    discord.apply_then_drop_next(10);
    assert!(try_call(&discord, Method::PATCH, &path, Some(json!({"content": "edited"}))).await.is_err());
    assert_eq!(contents(&discord, 10), ["edited"]);
    discord.apply_then_drop_next(10);
    assert!(try_call(&discord, Method::DELETE, &path, None).await.is_err());
    assert!(discord.messages_in(10).is_empty());

    let outcomes: Vec<_> = discord.calls().iter().map(|call| (call.status, call.dropped)).collect();
    assert_eq!(
        outcomes,
        [
            (None, Some(DiscordDropped::AfterApply(200))),
            (Some(200), None),
            (None, Some(DiscordDropped::AfterApply(200))),
            (None, Some(DiscordDropped::AfterApply(204))),
        ]
    );
}

#[tokio::test]
async fn drop_next_before_apply_loses_the_call_and_applies_nothing() {
    let discord = fake().await;
    discord.add_guild_channel(1, 10);
    let (_, created, _) =
        call(&discord, Method::POST, "/channels/10/messages", Some(json!({"content": "one"})), TOKEN).await;
    let path = format!("/channels/10/messages/{}", created["id"].as_str().unwrap());
    discord.drop_next_before_apply(10);
    assert!(try_call(&discord, Method::POST, "/channels/10/messages", Some(json!({"content": "lost"}))).await.is_err());
    discord.drop_next_before_apply(10);
    assert!(try_call(&discord, Method::PATCH, &path, Some(json!({"content": "lost"}))).await.is_err());
    discord.drop_next_before_apply(10);
    assert!(try_call(&discord, Method::DELETE, &path, None).await.is_err());
    assert_eq!(contents(&discord, 10), ["one"]);
    assert_eq!(discord.messages_in(10)[0].edits, 0);
    let dropped: Vec<_> = discord.calls().iter().skip(1).map(|call| call.dropped).collect();
    assert_eq!(dropped, [Some(DiscordDropped::BeforeApply); 3]);
    // Used once each: the next call is answered.
    assert_eq!(try_call(&discord, Method::DELETE, &path, None).await.unwrap(), 204);
}

#[tokio::test]
async fn a_rate_limit_storm_outlasts_the_retry_after_it_announces_and_spares_queued_faults() {
    let discord = fake().await;
    discord.add_guild_channel(1, 10);
    // Scripted before the storm: it must hit the first call that gets through.
    discord.fail_next(10, 403);
    let ends = discord.rate_limit_storm(10, Duration::from_millis(2500));
    let message = json!({"content": "hi"});
    let (status, body, headers) =
        call(&discord, Method::POST, "/channels/10/messages", Some(message.clone()), TOKEN).await;
    assert_eq!((status, body["retry_after"].as_f64()), (429, Some(1.0)));
    assert_eq!(headers["retry-after"], "1");
    // Obeying retry_after is not enough.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(Instant::now() < ends, "the storm must still be on for this check");
    let (status, body, _) = call(&discord, Method::POST, "/channels/10/messages", Some(message.clone()), TOKEN).await;
    assert_eq!((status, body["retry_after"].as_f64()), (429, Some(1.0)));
    assert_eq!(discord.rate_limited_count(), 2);

    tokio::time::sleep_until(ends).await;
    assert_eq!(call(&discord, Method::POST, "/channels/10/messages", Some(message.clone()), TOKEN).await.0, 403);
    assert_eq!(call(&discord, Method::POST, "/channels/10/messages", Some(message), TOKEN).await.0, 200);
    assert_eq!(contents(&discord, 10), ["hi"]);
}
