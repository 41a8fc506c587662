//! The REST side: authentication, the message calls and their limits, recording.

use std::time::Duration;

use ferry_fakes::{DiscordUser, Mention};
use reqwest::Method;
use serde_json::json;

use crate::{TOKEN, call, fake};

#[tokio::test]
async fn the_gateway_url_and_the_bot_user_are_served_and_a_wrong_token_is_401() {
    let discord = fake().await;
    let (status, gateway, _) = call(&discord, Method::GET, "/gateway", None, TOKEN).await;
    assert_eq!((status, gateway["url"].as_str().unwrap()), (200, discord.gateway_url().as_str()));
    assert!(discord.gateway_url().starts_with("ws://127.0.0.1:"));
    let (status, me, _) = call(&discord, Method::GET, "/users/@me", None, TOKEN).await;
    assert_eq!((status, me["id"].as_str().unwrap()), (200, discord.bot_id().to_string().as_str()));
    assert_eq!(me["bot"], true);
    let (status, body, _) = call(&discord, Method::GET, "/users/@me", None, "wrong").await;
    assert_eq!((status, body["message"].as_str().unwrap()), (401, "401: Unauthorized"));
    assert_eq!(discord.calls().len(), 2, "both /users/@me calls recorded, the refused one too");
}

#[tokio::test]
async fn channels_describe_dms_text_channels_and_threads() {
    let discord = fake().await;
    discord.add_thread(1, 10, 11);
    let dm = discord.dm_channel(42);
    let (_, thread, _) = call(&discord, Method::GET, "/channels/11", None, TOKEN).await;
    assert_eq!((thread["type"].as_u64(), thread["parent_id"].as_str()), (Some(11), Some("10")));
    let (_, text, _) = call(&discord, Method::GET, "/channels/10", None, TOKEN).await;
    assert_eq!((text["type"].as_u64(), text["guild_id"].as_str()), (Some(0), Some("1")));
    let (_, direct, _) = call(&discord, Method::GET, &format!("/channels/{dm}"), None, TOKEN).await;
    assert_eq!(direct["type"].as_u64(), Some(1));
    let (status, unknown, _) = call(&discord, Method::GET, "/channels/77", None, TOKEN).await;
    assert_eq!((status, unknown["code"].as_i64()), (404, Some(10003)));
}

#[tokio::test]
async fn messages_are_created_edited_and_deleted_and_replies_reference_their_message() {
    let discord = fake().await;
    let user = discord.guild_message(1, 10, &DiscordUser::new(42, "ada"), "question", Mention::None);
    let body = json!({"content": "answer", "message_reference": {"message_id": user.to_string()}});
    let (status, created, _) = call(&discord, Method::POST, "/channels/10/messages", Some(body), TOKEN).await;
    assert_eq!(status, 200);
    assert_eq!(created["author"]["id"].as_str().unwrap(), discord.bot_id().to_string());
    assert_eq!(created["referenced_message"]["id"].as_str().unwrap(), user.to_string());
    let id = created["id"].as_str().unwrap().to_owned();
    let path = format!("/channels/10/messages/{id}");
    let (status, _, _) = call(&discord, Method::PATCH, &path, Some(json!({"content": "better"})), TOKEN).await;
    assert_eq!(status, 200);
    let shown = discord.messages_in(10);
    assert_eq!((shown[0].content.as_str(), shown[0].edits, shown[0].reply_to), ("better", 1, Some(user)));
    let (status, body, _) =
        call(&discord, Method::PATCH, &format!("/channels/10/messages/{user}"), Some(json!({"content": "x"})), TOKEN)
            .await;
    assert_eq!((status, body["code"].as_i64()), (403, Some(50005)), "the user's message is not the bot's to edit");
    assert_eq!(call(&discord, Method::DELETE, &path, None, TOKEN).await.0, 204);
    let (status, body, _) = call(&discord, Method::DELETE, &path, None, TOKEN).await;
    assert_eq!((status, body["code"].as_i64()), (404, Some(10008)));
    assert!(discord.messages_in(10).is_empty());
    assert_eq!(call(&discord, Method::POST, "/channels/10/typing", None, TOKEN).await.0, 204);
    assert_eq!(discord.typing(), vec![10]);
}

#[tokio::test]
async fn over_2000_characters_is_refused_with_discords_invalid_form_body() {
    let discord = fake().await;
    discord.add_guild_channel(1, 10);
    let long = json!({"content": "é".repeat(2001)});
    let (status, body, _) = call(&discord, Method::POST, "/channels/10/messages", Some(long), TOKEN).await;
    assert_eq!((status, body["code"].as_i64()), (400, Some(50035)));
    assert_eq!(body["errors"]["content"]["_errors"][0]["code"], "BASE_TYPE_MAX_LENGTH");
    let exact = json!({"content": "é".repeat(2000)});
    assert_eq!(call(&discord, Method::POST, "/channels/10/messages", Some(exact), TOKEN).await.0, 200);
    let (status, body, _) =
        call(&discord, Method::POST, "/channels/10/messages", Some(json!({"content": " "})), TOKEN).await;
    assert_eq!((status, body["code"].as_i64()), (400, Some(50006)));
}

#[tokio::test]
async fn scripted_429s_carry_retry_after_in_the_body_and_the_rate_limit_headers() {
    let discord = fake().await;
    discord.add_guild_channel(1, 10);
    discord.add_guild_channel(1, 20);
    discord.fail_next_with_429(10, Duration::from_millis(2500));
    let message = json!({"content": "hi"});
    let (status, body, headers) =
        call(&discord, Method::POST, "/channels/10/messages", Some(message.clone()), TOKEN).await;
    assert_eq!(status, 429);
    assert_eq!((body["retry_after"].as_f64(), body["global"].as_bool()), (Some(2.5), Some(false)));
    assert_eq!(headers["retry-after"], "3");
    assert_eq!(headers["x-ratelimit-remaining"], "0");
    assert_eq!(headers["x-ratelimit-reset-after"], "2.500");
    assert_eq!(
        call(&discord, Method::POST, "/channels/20/messages", Some(message.clone()), TOKEN).await.0,
        200,
        "another channel is not affected"
    );
    assert_eq!(call(&discord, Method::POST, "/channels/10/messages", Some(message), TOKEN).await.0, 200, "used once");
    assert_eq!(discord.rate_limited_count(), 1);
}

#[tokio::test]
async fn the_per_channel_limit_and_a_storm_answer_429_until_their_time_is_up() {
    let discord = ferry_fakes::FakeDiscord::start(TOKEN).await.unwrap();
    discord.add_guild_channel(1, 10);
    discord.add_guild_channel(1, 20);
    let message = json!({"content": "hi"});
    for _ in 0..5 {
        assert_eq!(call(&discord, Method::POST, "/channels/10/messages", Some(message.clone()), TOKEN).await.0, 200);
    }
    let (status, body, _) = call(&discord, Method::POST, "/channels/10/messages", Some(message.clone()), TOKEN).await;
    assert_eq!(status, 429);
    assert!(body["retry_after"].as_f64().unwrap() <= 5.0);
    discord.rate_limit_storm(20, Duration::from_secs(60));
    let (status, body, _) = call(&discord, Method::POST, "/channels/20/messages", Some(message), TOKEN).await;
    assert_eq!(status, 429);
    assert_eq!(body["retry_after"].as_f64(), Some(1.0), "a storm announces 1 s, however long it lasts: {body}");
    assert_eq!(discord.rate_limited_count(), 2);
}

#[tokio::test]
async fn server_errors_and_refusals_can_be_scripted_per_channel() {
    let discord = fake().await;
    discord.add_guild_channel(1, 10);
    discord.fail_next(10, 502);
    discord.fail_next(10, 403);
    let message = json!({"content": "hi"});
    assert_eq!(call(&discord, Method::POST, "/channels/10/messages", Some(message.clone()), TOKEN).await.0, 502);
    let (status, body, _) = call(&discord, Method::POST, "/channels/10/messages", Some(message.clone()), TOKEN).await;
    assert_eq!((status, body["code"].as_i64()), (403, Some(50001)));
    assert_eq!(call(&discord, Method::POST, "/channels/10/messages", Some(message), TOKEN).await.0, 200);
    let statuses: Vec<_> = discord.calls().iter().map(|call| call.status).collect();
    assert_eq!(statuses, [Some(502), Some(403), Some(200)]);
}
