//! What a fake model server says, turn by turn, independent of any provider's wire format.
//!
//! A test describes the model's behaviour once, as a FIFO queue of [`Turn`]s, and the same
//! script can then be replayed by [`FakeOpenAi`](crate::FakeOpenAi) or
//! [`FakeAnthropic`](crate::FakeAnthropic): each renders a turn in its own streaming format and
//! error shape. Each incoming request consumes exactly one turn, so a test that expects the
//! agent to retry after a 429 pushes the 429 turn followed by the turn it should get next.
//!
//! When the queue is empty, a *responder* set with `set_responder` computes the turn from the
//! request instead (scripted turns always win). That suits tests where the number and order of
//! requests is not known in advance, such as a chaos test restarting the agent at random: the
//! reply can name what the request asked about ([`RecordedRequest::last_user_text`]), and can
//! still be any turn, a stall or a cut included.
//!
//! [`RecordedRequest::last_user_text`]: crate::RecordedRequest::last_user_text
//!
//! "Deltas" below means the pieces of content a client assembles: thinking pieces, text pieces
//! and tool-call argument pieces. Framing events (role chunk, `message_start`, block starts and
//! stops, `ping`) are not deltas; this is what lets [`Turn::stall`] and [`Turn::cut`] mean the
//! same thing for both providers.

use std::time::Duration;

/// One scripted answer to one request.
///
/// [`Turn::Stall`], [`Turn::Cut`] and [`Turn::Raw`] are streaming scenarios and answer with an
/// event stream even when the request did not ask for `"stream": true`.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Turn {
    /// A well-formed assistant message: streamed when the request asked for `"stream": true`,
    /// otherwise answered as one JSON document.
    Reply(Reply),
    /// An HTTP error in the provider's error body shape.
    Error(HttpError),
    /// The provider's own "prompt too long" 400, so context-compaction paths can be tested.
    ContextOverflow,
    /// Streams `reply` up to its `after_deltas`-th delta, then keeps the connection open and
    /// silent until the client goes away or the fake is dropped.
    Stall { reply: Reply, after_deltas: usize },
    /// Streams `reply` up to its `after_deltas`-th delta, then drops the connection without the
    /// proper end (`data: [DONE]` / `message_stop`), as a crashed proxy would.
    Cut { reply: Reply, after_deltas: usize },
    /// A 200 `text/event-stream` whose body is this text verbatim, for malformed-stream tests.
    Raw(String),
}

impl Turn {
    /// A plain text reply streamed as these pieces, in order.
    pub fn text<I, S>(pieces: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::Reply(Reply::text(pieces))
    }

    /// An assistant message that calls these tools (in one message, in order).
    pub fn tool_calls(calls: impl IntoIterator<Item = ToolCall>) -> Self {
        Self::Reply(Reply::tool_calls(calls))
    }

    /// An error with this status and message; see [`HttpError`] for `retry-after`.
    pub fn error(status: u16, message: impl Into<String>) -> Self {
        Self::Error(HttpError::new(status, message))
    }

    /// A 429 rate-limit error carrying `retry-after: <seconds>`.
    pub fn rate_limited(retry_after_secs: u64) -> Self {
        Self::Error(HttpError::new(429, "Rate limit reached, please try again later.").retry_after(retry_after_secs))
    }

    /// The provider's context-length-exceeded error.
    pub fn context_overflow() -> Self {
        Self::ContextOverflow
    }

    /// See [`Turn::Stall`].
    pub fn stall(reply: Reply, after_deltas: usize) -> Self {
        Self::Stall { reply, after_deltas }
    }

    /// See [`Turn::Cut`].
    pub fn cut(reply: Reply, after_deltas: usize) -> Self {
        Self::Cut { reply, after_deltas }
    }

    /// See [`Turn::Raw`]. The text must carry its own SSE framing (`data: ...\n\n`).
    pub fn raw(sse: impl Into<String>) -> Self {
        Self::Raw(sse.into())
    }
}

impl From<Reply> for Turn {
    fn from(reply: Reply) -> Self {
        Self::Reply(reply)
    }
}

impl From<HttpError> for Turn {
    fn from(error: HttpError) -> Self {
        Self::Error(error)
    }
}

/// A well-formed assistant message: optional reasoning, optional text, then tool calls.
///
/// That order is the one both providers use, so one `Reply` renders faithfully for each.
#[derive(Clone, Debug, Default)]
pub struct Reply {
    redacted_thinking: Vec<String>,
    thinking: Vec<String>,
    text: Vec<String>,
    tool_calls: Vec<ToolCall>,
    usage: Usage,
    chunk_delay: Option<Duration>,
    stop_reason: Option<StopReason>,
}

impl Reply {
    /// A text reply streamed as these pieces, in order. Empty pieces are sent as they are.
    pub fn text<I, S>(pieces: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self { text: pieces.into_iter().map(Into::into).collect(), ..Self::default() }
    }

    /// A message that calls these tools; add [`Reply::with_text`] for text before the calls.
    pub fn tool_calls(calls: impl IntoIterator<Item = ToolCall>) -> Self {
        Self { tool_calls: calls.into_iter().collect(), ..Self::default() }
    }

    /// Text streamed before any tool call, replacing text set earlier.
    pub fn with_text<I, S>(mut self, pieces: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.text = pieces.into_iter().map(Into::into).collect();
        self
    }

    /// Reasoning streamed before everything else: an Anthropic `thinking` block, or OpenAI-style
    /// `delta.reasoning_content` (the DeepSeek / vLLM convention).
    pub fn with_thinking<I, S>(mut self, pieces: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.thinking = pieces.into_iter().map(Into::into).collect();
        self
    }

    /// Appends an Anthropic `redacted_thinking` block carrying this opaque `data`, sent before
    /// the thinking and text blocks as one `content_block_start` with no deltas (the real API
    /// sends reasoning its safety systems flagged this way). Call it again for more blocks.
    /// The fake remembers the data it sent, and accepts it back in a later request's history.
    /// OpenAI-compatible servers have no such thing, so the OpenAI fake leaves it out.
    pub fn with_redacted_thinking(mut self, data: impl Into<String>) -> Self {
        self.redacted_thinking.push(data.into());
        self
    }

    /// Appends one more tool call after those already set.
    pub fn with_tool_call(mut self, call: ToolCall) -> Self {
        self.tool_calls.push(call);
        self
    }

    /// The token counts the provider reports for this message.
    pub fn with_usage(mut self, input_tokens: u32, output_tokens: u32) -> Self {
        self.usage = Usage { input_tokens, output_tokens };
        self
    }

    /// A pause before every streamed event after the first, to exercise incremental rendering
    /// and idle timers. Ignored for non-streaming answers.
    pub fn with_chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay = Some(delay);
        self
    }

    /// Overrides the stop reason, which otherwise is [`StopReason::ToolUse`] when the message
    /// has tool calls and [`StopReason::EndTurn`] when it has none.
    pub fn with_stop_reason(mut self, stop_reason: StopReason) -> Self {
        self.stop_reason = Some(stop_reason);
        self
    }

    /// The `data` of each redacted thinking block, in order.
    pub fn redacted_thinking(&self) -> &[String] {
        &self.redacted_thinking
    }

    /// The reasoning pieces, in streaming order.
    pub fn thinking(&self) -> &[String] {
        &self.thinking
    }

    /// The text pieces, in streaming order.
    pub fn text_pieces(&self) -> &[String] {
        &self.text
    }

    /// The tool calls, in order.
    pub fn calls(&self) -> &[ToolCall] {
        &self.tool_calls
    }

    /// The token counts reported; zero unless [`Reply::with_usage`] set them.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// The pause between streamed events, if any.
    pub fn chunk_delay(&self) -> Option<Duration> {
        self.chunk_delay
    }

    /// The stop reason reported: the override, or what the content implies.
    pub fn stop_reason(&self) -> StopReason {
        match self.stop_reason {
            Some(reason) => reason,
            None if self.tool_calls.is_empty() => StopReason::EndTurn,
            None => StopReason::ToolUse,
        }
    }

    /// All thinking pieces joined, as a non-streaming answer carries them.
    pub(crate) fn full_thinking(&self) -> String {
        self.thinking.concat()
    }

    /// All text pieces joined, as a non-streaming answer carries them.
    pub(crate) fn full_text(&self) -> String {
        self.text.concat()
    }
}

/// Why the message ended; each provider spells it its own way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// OpenAI `"stop"`, Anthropic `"end_turn"`.
    EndTurn,
    /// OpenAI `"tool_calls"`, Anthropic `"tool_use"`.
    ToolUse,
    /// The output was truncated: OpenAI `"length"`, Anthropic `"max_tokens"`.
    MaxTokens,
}

/// Token counts reported for a message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: u32,
    pub output_tokens: u32,
}

/// One tool call whose argument JSON is streamed in pieces.
///
/// The arguments are a string, not a `serde_json::Value`, so a test can also script invalid
/// JSON and see how the agent copes with a model that produces it.
#[derive(Clone, Debug)]
pub struct ToolCall {
    id: String,
    name: String,
    arguments: String,
    split_points: Vec<usize>,
}

impl ToolCall {
    /// A call sent as a single argument piece until [`ToolCall::split_at`] says otherwise.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        Self { id: id.into(), name: name.into(), arguments: arguments.into(), split_points: Vec::new() }
    }

    /// Streams the arguments in pieces cut at these byte offsets (sorted and deduplicated;
    /// offsets at 0 or past the end are ignored).
    ///
    /// # Panics
    /// If an offset is not on a UTF-8 character boundary: that is a bug in the test's script,
    /// and a piece that is not valid UTF-8 cannot be sent inside JSON anyway.
    pub fn split_at(mut self, points: impl IntoIterator<Item = usize>) -> Self {
        let mut points: Vec<usize> = points.into_iter().filter(|&p| p > 0 && p < self.arguments.len()).collect();
        points.sort_unstable();
        points.dedup();
        for &point in &points {
            assert!(
                self.arguments.is_char_boundary(point),
                "split point {point} is not a character boundary of the arguments {:?}",
                self.arguments
            );
        }
        self.split_points = points;
        self
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The complete argument text, as the pieces concatenate to.
    pub fn arguments(&self) -> &str {
        &self.arguments
    }

    /// The argument pieces in streaming order; none when the arguments are empty.
    pub fn pieces(&self) -> Vec<&str> {
        let mut pieces = Vec::with_capacity(self.split_points.len() + 1);
        let mut start = 0;
        for &point in &self.split_points {
            pieces.push(&self.arguments[start..point]);
            start = point;
        }
        if start < self.arguments.len() {
            pieces.push(&self.arguments[start..]);
        }
        pieces
    }
}

/// A scripted HTTP error. The provider picks the error `type` from the status (for instance
/// 429 is `rate_limit_exceeded` / `rate_limit_error`) unless [`HttpError::error_type`] says
/// otherwise.
#[derive(Clone, Debug)]
pub struct HttpError {
    status: u16,
    message: String,
    retry_after_secs: Option<u64>,
    error_type: Option<String>,
}

impl HttpError {
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        Self { status, message: message.into(), retry_after_secs: None, error_type: None }
    }

    /// Adds a `retry-after: <seconds>` header, as both providers send with 429 and 5xx errors.
    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after_secs = Some(seconds);
        self
    }

    /// Overrides the provider error type, e.g. OpenAI's `insufficient_quota` (a 429 that must not
    /// be retried) or Anthropic's `overloaded_error`. For OpenAI it is used as the `code` too.
    pub fn error_type(mut self, error_type: impl Into<String>) -> Self {
        self.error_type = Some(error_type.into());
        self
    }

    pub fn status(&self) -> u16 {
        self.status
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after_secs
    }

    pub fn overridden_type(&self) -> Option<&str> {
        self.error_type.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_concatenate_to_the_arguments() {
        let call = ToolCall::new("call_1", "read", r#"{"path":"/tmp/a"}"#).split_at([12, 3, 3, 0, 99]);
        assert_eq!(call.pieces(), vec![r#"{"p"#, r#"ath":"/tm"#, r#"p/a"}"#]);
        assert_eq!(call.pieces().concat(), call.arguments());
        assert!(ToolCall::new("c", "n", "").pieces().is_empty());
    }

    #[test]
    #[should_panic(expected = "not a character boundary")]
    fn splitting_inside_a_character_is_a_script_bug() {
        let _ = ToolCall::new("c", "n", "\"é\"").split_at([2]);
    }

    #[test]
    fn stop_reason_follows_the_content_unless_overridden() {
        assert_eq!(Reply::text(["hi"]).stop_reason(), StopReason::EndTurn);
        assert_eq!(Reply::tool_calls([ToolCall::new("c", "n", "{}")]).stop_reason(), StopReason::ToolUse);
        assert_eq!(Reply::text(["hi"]).with_stop_reason(StopReason::MaxTokens).stop_reason(), StopReason::MaxTokens);
    }
}
