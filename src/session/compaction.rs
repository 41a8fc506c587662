//! Compaction (SPEC §6.9): when a session's context is summarized, where it is cut, how the
//! summary is asked for, and how it is kept.
//!
//! ```text
//! context:  [summary?] u a t t a  u a  u a t a | u (the running turn)
//!                      └ summarized ─┘ └ kept ───────────────────────┘
//! after:    [new summary] u a t a | u …
//! ```
//!
//! - **When**: the prompt (system + context) would cross `context_window - reserve_tokens`
//!   ([`needs_compaction`]), counted from the provider's usage when it reported one and
//!   estimated at [`CHARS_PER_TOKEN`] otherwise ([`context_tokens`]). The agent loop asks
//!   before each model call, and compacts after a context-overflow error too.
//! - **Where**: at a user message ([`choose_cut`]), so a tool call is never parted from its
//!   result; the most recent [`KEEP_SHARE`] of the budget stays as it is.
//! - **How**: one plain model call ([`summarize_request`]) whose answer becomes a compaction
//!   entry in the store ([`SessionStore::compact`]); from then on the context is the summary,
//!   as one clearly marked message ([`summary_message`]), plus the entries it did not cover.
//!
//! [`SessionCompactor`] ties these to a session for the loop (the
//! [`Compactor`](crate::agent::compaction::Compactor) it calls) and for `/compact`.

use async_trait::async_trait;
use futures::StreamExt;

use crate::agent::compaction::{CompactRequest, Compacted, CompactionError, Compactor, ContextBudget, ReportedContext};
use crate::agent::providers::{ModelEvent, ModelRequest, ProviderError, ResolvedModel};
use crate::agent::{ChatMessage, Usage};
use crate::state::sessions::{CompactionEntry, SessionStore};
pub use crate::state::sessions::{SUMMARY_HEADER, is_summary, summary_message};

/// The estimate when the provider did not count: about four characters per token for
/// English text with common tokenizers (OpenAI's rule of thumb).
pub const CHARS_PER_TOKEN: usize = 4;

/// Tokens each message costs beyond its text (role, framing), as in OpenAI's accounting.
const MESSAGE_OVERHEAD_TOKENS: u64 = 4;

/// The share of the budget the most recent turns may keep unsummarized (percent).
pub const KEEP_SHARE: u64 = 30;

/// Tokens one image is counted as, whatever its base64 length: about what Anthropic charges
/// for an image at the size Ferry sends ((1568 × 1568 px capped at ~1.15 megapixels) / 750
/// ≈ 1,600 tokens), and more than OpenAI's high-detail tiles cost. Its base64 would count
/// for a hundred times that.
pub const IMAGE_TOKENS: u64 = 1_600;

/// Tool results longer than this are cut in the text given to the summarizer.
const TOOL_TEXT_FOR_SUMMARY: usize = 2_000;

/// The longest reply asked of the summarizer.
const SUMMARY_MAX_TOKENS: u32 = 2_048;

/// What the summarizer is told.
const SUMMARY_PROMPT: &str = "You compact conversations between a user and an AI assistant. Summarize the \
conversation you are given so the assistant can continue it without the original: the user's goals and \
preferences, decisions made, facts and results learned (tool results included), open questions and pending \
tasks. Be concise and factual; keep names, numbers, paths and identifiers exactly. Write the summary only, \
with no preamble.";

/// The estimated tokens of one message; an image counts [`IMAGE_TOKENS`].
pub fn estimate_message(message: &ChatMessage) -> u64 {
    let mut images = 0;
    let chars = match message {
        ChatMessage::User { text, .. } => text.chars().count(),
        ChatMessage::Assistant { text, tool_calls, .. } => {
            text.chars().count()
                + tool_calls
                    .iter()
                    .map(|call| call.name.chars().count() + call.arguments.chars().count())
                    .sum::<usize>()
        }
        ChatMessage::ToolResult { name, content, images: attached, .. } => {
            images = attached.len() as u64;
            name.chars().count() + content.chars().count()
        }
    };
    (chars.div_ceil(CHARS_PER_TOKEN)) as u64 + MESSAGE_OVERHEAD_TOKENS + images * IMAGE_TOKENS
}

/// The estimated tokens of a system prompt and messages.
pub fn estimate(system: &str, messages: &[ChatMessage]) -> u64 {
    system.chars().count().div_ceil(CHARS_PER_TOKEN) as u64 + messages.iter().map(estimate_message).sum::<u64>()
}

/// The prompt's tokens: the provider's count for the prefix it reported on plus an estimate
/// of what came after, or an estimate of everything.
pub fn context_tokens(system: &str, messages: &[ChatMessage], reported: Option<ReportedContext>) -> u64 {
    match reported {
        Some(reported) if reported.messages <= messages.len() => {
            reported.tokens + messages[reported.messages..].iter().map(estimate_message).sum::<u64>()
        }
        _ => estimate(system, messages),
    }
}

/// Whether the prompt would cross the budget's limit.
pub fn needs_compaction(
    budget: ContextBudget,
    system: &str,
    messages: &[ChatMessage],
    reported: Option<ReportedContext>,
) -> bool {
    context_tokens(system, messages, reported) > budget.limit()
}

/// Whether cutting before `messages[cut]` keeps every tool call with its result: the kept
/// part starts with a user message and answers no tool call made before it.
pub fn is_clean_cut(messages: &[ChatMessage], cut: usize) -> bool {
    if !matches!(messages.get(cut), Some(ChatMessage::User { .. })) {
        return false;
    }
    let earlier_calls: Vec<&str> = messages[..cut]
        .iter()
        .flat_map(|message| match message {
            ChatMessage::Assistant { tool_calls, .. } => tool_calls.iter().map(|call| call.id.as_str()).collect(),
            _ => Vec::new(),
        })
        .collect();
    !messages[cut..].iter().any(
        |message| matches!(message, ChatMessage::ToolResult { call_id, .. } if earlier_calls.contains(&call_id.as_str())),
    )
}

/// Where to cut: `messages[..cut]` are summarized. The earliest clean cut (at most
/// `compactable`) whose kept part fits in `keep_tokens`, else the latest clean cut; `None`
/// when no cut would summarize anything new.
pub fn choose_cut(messages: &[ChatMessage], compactable: usize, keep_tokens: u64) -> Option<usize> {
    let already_summarized = usize::from(messages.first().is_some_and(is_summary));
    let candidates: Vec<usize> = (already_summarized + 1..=compactable.min(messages.len().saturating_sub(1)))
        .filter(|&cut| is_clean_cut(messages, cut))
        .collect();
    // Tokens from each index to the end, computed once.
    let mut tail = vec![0u64; messages.len() + 1];
    for index in (0..messages.len()).rev() {
        tail[index] = tail[index + 1] + estimate_message(&messages[index]);
    }
    candidates.iter().copied().find(|&cut| tail[cut] <= keep_tokens).or(candidates.last().copied())
}

/// The tokens the kept part may use: [`KEEP_SHARE`] of the budget, and never more than that
/// share of the context itself (so a compaction after an overflow always shrinks it).
pub fn keep_tokens(budget: ContextBudget, context_tokens: u64) -> u64 {
    budget.limit().min(context_tokens) * KEEP_SHARE / 100
}

/// The summarizing call for `messages` (the part to summarize), with optional extra
/// instructions.
pub fn summarize_request(
    model: &str,
    messages: &[ChatMessage],
    instructions: Option<&str>,
    budget: ContextBudget,
) -> ModelRequest {
    let mut transcript = String::new();
    for message in messages {
        match message {
            ChatMessage::User { text, .. } if is_summary(message) => {
                transcript
                    .push_str(&format!("Summary of what came before:\n{}\n\n", text[SUMMARY_HEADER.len()..].trim()));
            }
            ChatMessage::User { text, .. } => transcript.push_str(&format!("User: {text}\n\n")),
            ChatMessage::Assistant { text, tool_calls, .. } => {
                if !text.trim().is_empty() {
                    transcript.push_str(&format!("Assistant: {text}\n\n"));
                }
                for call in tool_calls {
                    transcript.push_str(&format!("Assistant called tool {} with {}\n\n", call.name, call.arguments));
                }
            }
            ChatMessage::ToolResult { name, content, is_error, images, .. } => {
                let outcome = if *is_error { "failed" } else { "returned" };
                transcript.push_str(&format!("Tool {name} {outcome}: {}\n", cut_text(content, TOOL_TEXT_FOR_SUMMARY)));
                // The summarizer reads text: an image is named by its size.
                for image in images {
                    transcript.push_str(&format!("[image {}×{}]\n", image.width, image.height));
                }
                transcript.push('\n');
            }
        }
    }
    // The summarizer's own prompt must fit too: keep the most recent part if it would not.
    let room = (budget.limit() as usize).saturating_mul(CHARS_PER_TOKEN) * 8 / 10;
    let length = transcript.chars().count();
    if length > room {
        let skip = length - room;
        transcript = format!("[… the oldest part was left out]\n{}", transcript.chars().skip(skip).collect::<String>());
    }
    let mut ask = format!("Summarize this conversation:\n\n{}", transcript.trim_end());
    if let Some(instructions) = instructions.map(str::trim).filter(|text| !text.is_empty()) {
        ask.push_str(&format!("\n\nAdditional instructions for the summary: {instructions}"));
    }
    ModelRequest {
        model: model.to_owned(),
        system: SUMMARY_PROMPT.to_owned(),
        messages: vec![ChatMessage::user(ask)],
        tools: Vec::new(),
        max_output_tokens: Some(SUMMARY_MAX_TOKENS),
        thinking: Default::default(),
        vision: false,
    }
}

fn cut_text(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}… [truncated]", &text[..cut]),
        None => text.to_owned(),
    }
}

/// Sends the summarizing call and collects its text. Not streamed to anyone.
async fn summarize(model: &ResolvedModel, request: &ModelRequest) -> Result<(String, Usage), ProviderError> {
    let mut stream = model.provider.stream(request).await?;
    let (mut text, mut usage) = (String::new(), Usage::default());
    while let Some(event) = stream.next().await {
        match event? {
            ModelEvent::TextDelta(delta) => text.push_str(&delta),
            ModelEvent::Usage(reported) => usage.add(reported),
            _ => {}
        }
    }
    Ok((text.trim().to_owned(), usage))
}

/// Compacts one session's context on behalf of the run (or command) that owns it.
pub struct SessionCompactor<'a> {
    store: &'a dyn SessionStore,
    key: String,
    run_id: String,
}

impl<'a> SessionCompactor<'a> {
    /// `run_id` must own the session (`begin_run`): the compaction entry is fenced like
    /// every other write.
    pub fn new(store: &'a dyn SessionStore, key: impl Into<String>, run_id: impl Into<String>) -> Self {
        Self { store, key: key.into(), run_id: run_id.into() }
    }
}

#[async_trait]
impl Compactor for SessionCompactor<'_> {
    fn needs_compaction(
        &self,
        budget: ContextBudget,
        system: &str,
        messages: &[ChatMessage],
        reported: Option<ReportedContext>,
    ) -> bool {
        needs_compaction(budget, system, messages, reported)
    }

    async fn compact(&self, request: CompactRequest<'_>) -> Result<Compacted, CompactionError> {
        let CompactRequest { model, budget, messages, compactable, instructions } = request;
        let tokens_before = estimate("", messages);
        let cut = choose_cut(messages, compactable, keep_tokens(budget, tokens_before))
            .ok_or(CompactionError::NothingToCompact)?;
        let ask = summarize_request(&model.model, &messages[..cut], instructions, budget);
        let (summary, usage) = summarize(model, &ask).await.map_err(CompactionError::Model)?;
        if summary.is_empty() {
            return Err(CompactionError::EmptySummary);
        }
        let entry = CompactionEntry { summary: summary.clone(), keep_from: cut, tokens_before };
        self.store
            .compact(&self.key, &self.run_id, compactable, &entry)
            .await
            .map_err(|error| CompactionError::Store(error.to_string()))?;
        let summarized = cut - usize::from(messages.first().is_some_and(is_summary));
        Ok(Compacted { summary: summary_message(&summary), keep_from: cut, summarized, tokens_before, usage })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::ToolCall;

    fn user(text: &str) -> ChatMessage {
        ChatMessage::user(text)
    }

    fn answer(text: &str) -> ChatMessage {
        ChatMessage::assistant(text, Vec::new())
    }

    fn calls(ids: &[&str]) -> ChatMessage {
        ChatMessage::Assistant {
            text: String::new(),
            tool_calls: ids
                .iter()
                .map(|id| ToolCall { id: (*id).into(), name: "current_time".into(), arguments: "{}".into() })
                .collect(),
            thinking: Vec::new(),
        }
    }

    fn result(id: &str) -> ChatMessage {
        ChatMessage::tool_result(id, "current_time", "noon", false)
    }

    #[test]
    fn the_estimate_is_a_quarter_of_the_characters_plus_framing() {
        assert_eq!(estimate_message(&user(&"x".repeat(400))), 100 + MESSAGE_OVERHEAD_TOKENS);
        assert_eq!(estimate_message(&user("abcde")), 2 + MESSAGE_OVERHEAD_TOKENS, "rounded up");
        let call = ChatMessage::Assistant {
            text: "abcd".into(),
            tool_calls: vec![ToolCall { id: "1".into(), name: "ab".into(), arguments: "cdefgh".into() }],
            thinking: Vec::new(),
        };
        assert_eq!(estimate_message(&call), 3 + MESSAGE_OVERHEAD_TOKENS, "tool calls count too");
        assert_eq!(estimate(&"s".repeat(8), &[user("abcd")]), 2 + 1 + MESSAGE_OVERHEAD_TOKENS);
    }

    #[test]
    fn an_image_counts_a_fixed_cost_not_its_base64_and_the_summarizer_sees_its_size() {
        let image = crate::types::conversation::ImagePart {
            media_type: "image/png".into(),
            data: "A".repeat(4_000_000),
            width: 1568,
            height: 392,
        };
        let with_image = ChatMessage::ToolResult {
            call_id: "c".into(),
            name: "read".into(),
            content: "abcd".into(),
            is_error: false,
            images: vec![image.clone(), image],
        };
        assert_eq!(estimate_message(&with_image), 2 + MESSAGE_OVERHEAD_TOKENS + 2 * IMAGE_TOKENS);

        let budget = ContextBudget { context_window: 100_000, reserve_tokens: 0 };
        let request = summarize_request("m", &[user("look"), calls(&["c"]), with_image], None, budget);
        let ChatMessage::User { text, .. } = &request.messages[0] else { panic!("a user message") };
        assert!(text.contains("Tool read returned: abcd\n[image 1568×392]\n[image 1568×392]"), "{text}");
        assert!(!text.contains("AAAA"));
    }

    #[test]
    fn reported_usage_replaces_the_estimate_for_the_prefix_it_covers() {
        let messages = [user(&"x".repeat(4000)), answer("ok"), user("abcd")];
        let reported = ReportedContext { tokens: 50, messages: 2 };
        assert_eq!(context_tokens("", &messages, Some(reported)), 50 + 1 + MESSAGE_OVERHEAD_TOKENS);
        assert!(context_tokens("", &messages, None) > 1000);
        // A count for a longer context than this one (compacted since) is not used.
        let stale = ReportedContext { tokens: 50, messages: 9 };
        assert_eq!(context_tokens("", &messages, Some(stale)), context_tokens("", &messages, None));
    }

    #[test]
    fn the_threshold_is_the_window_minus_the_reserve() {
        let budget = ContextBudget { context_window: 2_000, reserve_tokens: 500 };
        assert_eq!(budget.limit(), 1_500);
        let under = [user(&"x".repeat(4 * 1_400))];
        let over = [user(&"x".repeat(4 * 1_500))];
        assert!(!needs_compaction(budget, "", &under, None));
        assert!(needs_compaction(budget, "", &over, None));
        assert_eq!(
            ContextBudget { context_window: 1_000, reserve_tokens: 5_000 }.limit(),
            250,
            "never below a quarter"
        );
    }

    #[test]
    fn a_cut_never_parts_a_tool_call_from_its_result() {
        let messages =
            [user("q1"), calls(&["a", "b"]), result("a"), result("b"), answer("a1"), user("q2"), answer("a2")];
        for cut in 0..messages.len() {
            assert_eq!(is_clean_cut(&messages, cut), cut == 0 || cut == 5, "cut {cut}");
        }
        // A result that (oddly) follows a later user message still binds the cut.
        let steered = [user("q1"), calls(&["a"]), user("steer"), result("a"), user("q2")];
        assert!(!is_clean_cut(&steered, 2));
        assert!(is_clean_cut(&steered, 4));
    }

    #[test]
    fn the_cut_keeps_the_most_recent_turns_that_fit_and_only_compactable_entries() {
        let big = "x".repeat(400);
        let messages = [
            user(&big),
            calls(&["a"]),
            result("a"),
            answer(&big),
            user(&big),
            answer(&big),
            user("q3"),
            answer("a3"),
            user("now"),
        ];
        // Everything from the last user message fits: the earliest cut whose tail fits.
        assert_eq!(choose_cut(&messages, 8, 40), Some(6));
        // A generous keep budget still summarizes at least the first turn.
        assert_eq!(choose_cut(&messages, 8, 10_000), Some(4));
        // Nothing fits: the latest clean cut, within the compactable part.
        assert_eq!(choose_cut(&messages, 8, 0), Some(8));
        assert_eq!(choose_cut(&messages, 7, 0), Some(6));
        // The current turn alone: nothing old to summarize.
        assert_eq!(choose_cut(&messages[..1], 0, 0), None);
        assert_eq!(choose_cut(&[summary_message("s"), user("now")], 1, 0), None, "only a summary before");
        assert_eq!(choose_cut(&[summary_message("s"), answer("x"), user("now")], 2, 0), Some(2));
    }

    #[test]
    fn the_summarize_request_renders_the_transcript_with_tools_and_instructions() {
        let budget = ContextBudget { context_window: 100_000, reserve_tokens: 0 };
        let messages = [summary_message("they met"), user("time?"), calls(&["a"]), result("a"), answer("noon")];
        let request = summarize_request("m", &messages, Some("keep the times"), budget);
        assert!(request.tools.is_empty());
        let ChatMessage::User { text, .. } = &request.messages[0] else { panic!() };
        for expected in [
            "Summary of what came before:\nthey met",
            "User: time?",
            "Assistant called tool current_time with {}",
            "Tool current_time returned: noon",
            "Assistant: noon",
            "Additional instructions for the summary: keep the times",
        ] {
            assert!(text.contains(expected), "{expected:?} in {text}");
        }
    }
}
