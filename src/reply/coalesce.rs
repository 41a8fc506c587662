//! Block streaming's sender (SPEC §7): blocks cut by the chunker become chat messages,
//! merged when they come quickly, paced when the operator wants it to read like typing.
//!
//! Blocks that arrive less than `idle` apart are merged into one message (joined by a blank
//! line) up to the channel's text limit; a block that has waited `idle` without company is
//! sent. With a human delay, every message after the first waits a random pause first. A
//! send that hangs longer than [`BLOCK_SEND_TIMEOUT`] stops block streaming for the turn:
//! the final reply is then delivered the normal way, so nothing is lost to a stuck call.

use std::time::Duration;

use ferry_channel::{ChannelError, MarkupDialect, OutboundMessage, Target, TextFormat};
use rand::Rng;
use tokio::time::Instant;

use super::format;
use super::ledger::RunSends;
use super::ledger::sends::block_digest;
use super::outbound::OutboundScheduler;
use crate::config::HumanDelay;

/// A block send slower than this is treated as stuck.
pub const BLOCK_SEND_TIMEOUT: Duration = Duration::from_secs(15);

/// How block streaming went, for the turn's final delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlocksOutcome {
    /// Every block was delivered: the final reply must not be sent again.
    Delivered,
    /// Nothing was streamed: deliver the final reply normally.
    NothingSent,
    /// A send hung or failed: deliver the final reply normally.
    Stopped,
}

/// How the channel shows a message: blocks are rendered and split like any reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockFormat {
    pub text_limit: usize,
    pub markup: MarkupDialect,
    pub max_lines: Option<usize>,
}

pub struct Coalescer {
    scheduler: OutboundScheduler,
    target: Target,
    run_id: String,
    idle: Duration,
    text_limit: usize,
    format: BlockFormat,
    delay: HumanDelay,
    /// Blocks waiting to go out together.
    buffer: String,
    /// What the reply's first message is threaded to, and what every later one is.
    reply_to: (Option<String>, Option<String>),
    last_block: Option<Instant>,
    sent: usize,
    stopped: bool,
    /// The delivery ledger's record of the reply's sends: each block message is recorded
    /// once sent, and a resumed run sends only the text beyond what a killed attempt sent.
    ledger: Option<RunSends>,
    /// Digests of the waiting blocks ([`block_digest`]), recorded with their message.
    buffer_blocks: Vec<String>,
    /// Blocks a killed attempt had sent, pushed again by the resumed run and not sent.
    resent_skipped: usize,
    /// The block messages a killed attempt recorded were sent again
    /// ([`RunSends::replay_block_messages`]), before anything this run streams.
    replayed: bool,
}

impl Coalescer {
    pub fn new(
        scheduler: OutboundScheduler,
        target: Target,
        run_id: &str,
        idle: Duration,
        format: BlockFormat,
        delay: HumanDelay,
    ) -> Self {
        Self {
            scheduler,
            target,
            run_id: run_id.to_owned(),
            idle,
            text_limit: format.text_limit.max(1),
            format,
            delay,
            buffer: String::new(),
            reply_to: (None, None),
            last_block: None,
            sent: 0,
            stopped: false,
            ledger: None,
            buffer_blocks: Vec::new(),
            resent_skipped: 0,
            replayed: false,
        }
    }

    /// Sends every block under the delivery ledger ([`RunSends`]).
    pub fn record_with(&mut self, ledger: RunSends) {
        self.ledger = Some(ledger);
    }

    /// A block from the chunker, and the break the chunker cut before it (`"\n\n"`, `"\n"`
    /// or `" "`), which joins it to a waiting block. Sends what waited if this one comes too
    /// late to join it or would not fit with it.
    pub async fn push(&mut self, block: String, joiner: &str) {
        if self.stopped || block.trim().is_empty() {
            return;
        }
        self.replay().await;
        // A resumed run streams again what its killed attempt streamed: a block that
        // attempt sent is not sent again.
        let digest = self.ledger.as_ref().map(|_| block_digest(&block));
        if let (Some(ledger), Some(digest)) = (&self.ledger, &digest)
            && ledger.block_was_sent(digest)
        {
            self.resent_skipped += 1;
            return;
        }
        let joined_len = self.buffer.chars().count() + joiner.chars().count() + block.chars().count();
        if !self.buffer.is_empty() && (self.idle_passed() || joined_len > self.text_limit) {
            self.send_buffer().await;
        }
        if !self.buffer.is_empty() {
            self.buffer.push_str(joiner);
        }
        self.buffer.push_str(&block);
        self.buffer_blocks.extend(digest);
        self.last_block = Some(Instant::now());
    }

    /// Threads the messages not sent yet: the reply's first message to `first`, every later
    /// one to `rest` (per `reply_to_mode` and the model's reply directive).
    pub fn thread_to(&mut self, first: Option<String>, rest: Option<String>) {
        self.reply_to = (first, rest);
    }

    /// When the waiting blocks are due to be sent, if any wait.
    pub fn due(&self) -> Option<Instant> {
        (!self.buffer.is_empty() && !self.stopped)
            .then(|| self.last_block.map_or_else(Instant::now, |at| at + self.idle))
    }

    /// Sends the waiting blocks if they have waited long enough.
    pub async fn tick(&mut self) {
        if !self.buffer.is_empty() && self.idle_passed() {
            self.send_buffer().await;
        }
    }

    /// Sends whatever waits and says how block streaming went.
    pub async fn finish(mut self) -> BlocksOutcome {
        self.replay().await;
        if !self.buffer.is_empty() {
            self.send_buffer().await;
        }
        if let Some(ledger) = &self.ledger {
            ledger.settle().await;
        }
        match (self.stopped, self.sent + self.resent_skipped) {
            (true, _) => BlocksOutcome::Stopped,
            (false, 0) => BlocksOutcome::NothingSent,
            (false, _) => BlocksOutcome::Delivered,
        }
    }

    fn idle_passed(&self) -> bool {
        self.last_block.is_none_or(|at| at.elapsed() >= self.idle)
    }

    async fn send_buffer(&mut self) {
        let text = std::mem::take(&mut self.buffer);
        let blocks = std::mem::take(&mut self.buffer_blocks);
        if self.stopped {
            return;
        }
        if self.sent > 0
            && let Some(range) = self.delay.range_ms()
        {
            let pause = rand::rng().random_range(*range.start()..=(*range.end()).max(*range.start()));
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
        let BlockFormat { markup, max_lines, .. } = self.format;
        let text_format = if markup == MarkupDialect::Plain { TextFormat::Plain } else { TextFormat::Markup };
        let parts = format::split(&format::render(&text, markup), markup, self.text_limit, max_lines);
        let (first, rest) = &self.reply_to;
        let mut messages: Vec<OutboundMessage> = parts
            .into_iter()
            .enumerate()
            .map(|(index, part)| {
                let mut message = OutboundMessage::text(self.target.clone(), part);
                message.format = text_format;
                message.reply_to_message_id = if self.sent + index == 0 { first.clone() } else { rest.clone() };
                message
            })
            .collect();
        if let Some(ledger) = &self.ledger {
            ledger.prepare_block_message(&mut messages, &blocks).await;
        }
        for mut message in messages {
            let send = async {
                match &self.ledger {
                    Some(ledger) => ledger.send_block(&self.scheduler, message, markup).await.map(|_| ()),
                    None => {
                        message.idempotency_key = Some(format!("{}:block:{}", self.run_id, self.sent));
                        self.scheduler.send_or_plain(message, markup).await.map(|_| ())
                    }
                }
            };
            match within_timeout(send).await {
                Some(()) => self.sent += 1,
                None => {
                    self.stopped = true;
                    return;
                }
            }
        }
    }

    /// Sends again what a killed attempt at this reply recorded before sending it, once,
    /// before anything of this run.
    async fn replay(&mut self) {
        if self.replayed || self.stopped {
            return;
        }
        self.replayed = true;
        let Some(ledger) = &self.ledger else { return };
        match within_timeout(ledger.replay_block_messages(&self.scheduler, self.format.markup)).await {
            Some(parts) => self.sent += parts,
            None => self.stopped = true,
        }
    }
}

/// Awaits a block send. `None`: it failed or hung, and block streaming stops for the turn
/// (the final reply is then delivered whole).
async fn within_timeout<T>(send: impl Future<Output = Result<T, ChannelError>>) -> Option<T> {
    match tokio::time::timeout(BLOCK_SEND_TIMEOUT, send).await {
        Ok(Ok(sent)) => Some(sent),
        Ok(Err(error)) => {
            tracing::warn!(%error, "a streamed block could not be sent; the reply will be sent whole");
            None
        }
        Err(_) => {
            tracing::warn!("a streamed block hung for 15 s; the reply will be sent whole");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ferry_channel::memory::{MemoryChannel, OperationKind};
    use ferry_channel::{ChannelCapabilities, ChannelError, ChatKind, ChatRef};

    use super::*;
    use crate::reply::ledger::RecoveredSends;

    const IDLE: Duration = Duration::from_millis(1000);
    const PLAIN_4000: BlockFormat = BlockFormat { text_limit: 4000, markup: MarkupDialect::Plain, max_lines: None };

    fn setup(delay: HumanDelay) -> (Arc<MemoryChannel>, Coalescer) {
        let channel = Arc::new(MemoryChannel::with_capabilities(
            "memory",
            "default",
            ChannelCapabilities { text_limit: 4000, ..ChannelCapabilities::unrestricted() },
        ));
        let target = Target { chat: ChatRef::new(ChatKind::Direct, "42"), thread_id: None };
        let coalescer = Coalescer::new(OutboundScheduler::new(channel.clone()), target, "run", IDLE, PLAIN_4000, delay);
        (channel, coalescer)
    }

    fn paragraph(letter: char) -> String {
        std::iter::repeat_n(letter, 900).collect()
    }

    /// A resumed run streams again what its killed attempt streamed: the block that attempt
    /// sent is not sent again, the rest is, and the blocks count as the reply.
    #[tokio::test(start_paused = true)]
    async fn a_block_a_killed_attempt_sent_is_not_sent_again() {
        use crate::reply::ledger::DeliveryLedger;
        use crate::state::sqlite::inbound_log::InboundLog;

        let dir = tempfile::tempdir().unwrap();
        let log = InboundLog::open(&dir.path().join("inbound.log")).unwrap();
        let recorder = DeliveryLedger::new(Arc::new(log)).recorder(vec![1]);
        let recovered = RecoveredSends { blocks: [block_digest(&paragraph('a'))].into(), ..RecoveredSends::default() };
        let (channel, mut coalescer) = setup(HumanDelay::Off);
        coalescer.record_with(RunSends::new(recorder, recovered, 0));
        coalescer.push(paragraph('a'), "").await;
        tokio::time::advance(IDLE * 2).await;
        coalescer.push(paragraph('b'), "\n\n").await;
        assert_eq!(coalescer.finish().await, BlocksOutcome::Delivered);
        assert_eq!(channel.sent_texts(), [paragraph('b')]);
    }

    /// Where the platform settles a repeated send by key (Slack's lookup): a killed attempt
    /// sent block a alone; the resumed run streams a and b close together, which merges
    /// them. a is sent again reconciled (found, not repeated) and b goes out alone, rather
    /// than a merged message under a key of its own repeating a.
    #[tokio::test(start_paused = true)]
    async fn a_resumed_run_that_merges_blocks_does_not_repeat_one_its_killed_attempt_sent() {
        use crate::reply::ledger::DeliveryLedger;
        use crate::reply::ledger::testing::{accept, restarted};
        use crate::state::sqlite::inbound_log::InboundLog;
        use ferry_channel::SendReconciliation;

        let dir = tempfile::tempdir().unwrap();
        let log = InboundLog::open(&dir.path().join("inbound.log")).unwrap();
        let seq = accept(&log, "1").await;
        let capabilities = ChannelCapabilities {
            text_limit: 4000,
            send_reconciliation: SendReconciliation::Lookup,
            ..ChannelCapabilities::unrestricted()
        };
        let channel = Arc::new(MemoryChannel::with_capabilities("memory", "default", capabilities));
        let target = Target { chat: ChatRef::new(ChatKind::Direct, "42"), thread_id: None };
        let coalescer = |sends: RunSends| {
            let scheduler = OutboundScheduler::new(channel.clone());
            let mut coalescer = Coalescer::new(scheduler, target.clone(), "run", IDLE, PLAIN_4000, HumanDelay::Off);
            coalescer.record_with(sends);
            coalescer
        };
        let killed = DeliveryLedger::new(Arc::new(log.clone()));
        let mut first = coalescer(killed.sends(killed.recorder(vec![seq]), RecoveredSends::default()));
        // a lands, and the attempt never learns so (it is killed before the answer).
        channel.fail_next_after_applying(OperationKind::Send, ChannelError::Rejected { reason: "killed".into() });
        first.push(paragraph('a'), "").await;
        tokio::time::advance(IDLE * 2).await;
        first.tick().await;
        drop(first);

        let (ledger, recovered) = restarted(&log, &[seq]).await;
        let mut resumed = coalescer(ledger.sends(ledger.recorder(vec![seq]), recovered));
        resumed.push(paragraph('a'), "").await;
        resumed.push(paragraph('b'), "\n\n").await;
        assert_eq!(resumed.finish().await, BlocksOutcome::Delivered);
        assert_eq!(channel.sent_texts(), [paragraph('a'), paragraph('b')]);
    }

    #[tokio::test(start_paused = true)]
    async fn blocks_more_than_idle_apart_are_separate_messages() {
        let (channel, mut coalescer) = setup(HumanDelay::Off);
        for letter in ['a', 'b', 'c'] {
            coalescer.push(paragraph(letter), "\n\n").await;
            tokio::time::advance(Duration::from_millis(1100)).await;
            coalescer.tick().await;
        }
        assert_eq!(coalescer.finish().await, BlocksOutcome::Delivered);
        assert_eq!(channel.sent_texts(), [paragraph('a'), paragraph('b'), paragraph('c')]);
    }

    #[tokio::test(start_paused = true)]
    async fn blocks_close_together_are_merged_up_to_the_limit() {
        let (channel, mut coalescer) = setup(HumanDelay::Off);
        for letter in ['a', 'b', 'c'] {
            coalescer.push(paragraph(letter), "\n\n").await;
            tokio::time::advance(Duration::from_millis(300)).await;
            coalescer.tick().await;
        }
        assert_eq!(coalescer.finish().await, BlocksOutcome::Delivered);
        assert_eq!(channel.sent_texts(), [format!("{}\n\n{}\n\n{}", paragraph('a'), paragraph('b'), paragraph('c'))]);

        let (channel, mut coalescer) = setup(HumanDelay::Off);
        for letter in ['a', 'b', 'c', 'd', 'e'] {
            coalescer.push(paragraph(letter), "\n\n").await;
        }
        coalescer.finish().await;
        let lengths: Vec<usize> = channel.sent_texts().iter().map(|t| t.chars().count()).collect();
        assert_eq!(lengths, [900 * 4 + 6, 900], "four fit in 4000 characters, the fifth does not");
    }

    #[tokio::test(start_paused = true)]
    async fn a_natural_delay_paces_every_message_after_the_first() {
        let (channel, mut coalescer) = setup(HumanDelay::Natural);
        let start = Instant::now();
        coalescer.push(paragraph('a'), "\n\n").await;
        tokio::time::advance(IDLE).await;
        coalescer.tick().await;
        assert!(start.elapsed() < Duration::from_millis(1100), "the first goes out without a pause");
        coalescer.push(paragraph('b'), "\n\n").await;
        tokio::time::advance(IDLE).await;
        let before = Instant::now();
        coalescer.tick().await;
        let paused = before.elapsed();
        assert!(paused >= Duration::from_millis(800) && paused <= Duration::from_millis(2500), "{paused:?}");
        assert_eq!(channel.sent_texts().len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_block_stops_block_streaming_so_the_reply_goes_out_whole() {
        let (channel, mut coalescer) = setup(HumanDelay::Off);
        channel.fail_next(OperationKind::Send, ChannelError::Rejected { reason: "blocked".into() });
        coalescer.push(paragraph('a'), "\n\n").await;
        tokio::time::advance(IDLE).await;
        coalescer.tick().await;
        coalescer.push(paragraph('b'), "\n\n").await;
        assert_eq!(coalescer.finish().await, BlocksOutcome::Stopped);
        assert!(channel.sent_texts().is_empty());
    }

    /// A platform that never answers.
    struct Hanging(ChannelCapabilities);

    #[async_trait::async_trait]
    impl ferry_channel::Channel for Hanging {
        fn name(&self) -> &str {
            "hanging"
        }

        fn account_id(&self) -> &str {
            "default"
        }

        fn capabilities(&self) -> &ChannelCapabilities {
            &self.0
        }

        async fn start(&self) -> Result<ferry_channel::InboundStream, ChannelError> {
            Err(ChannelError::Closed)
        }

        async fn send(&self, _message: OutboundMessage) -> Result<ferry_channel::SentMessage, ChannelError> {
            std::future::pending().await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_block_send_hanging_for_15_s_stops_block_streaming() {
        let channel = Arc::new(Hanging(ChannelCapabilities::unrestricted()));
        let target = Target { chat: ChatRef::new(ChatKind::Direct, "42"), thread_id: None };
        let mut coalescer =
            Coalescer::new(OutboundScheduler::new(channel), target, "run", IDLE, PLAIN_4000, HumanDelay::Off);
        coalescer.push(paragraph('a'), "\n\n").await;
        let start = Instant::now();
        assert_eq!(coalescer.finish().await, BlocksOutcome::Stopped);
        assert_eq!(start.elapsed(), BLOCK_SEND_TIMEOUT);
    }

    #[tokio::test(start_paused = true)]
    async fn blocks_are_rendered_in_the_channels_markup() {
        let channel = Arc::new(MemoryChannel::new("memory", "default"));
        let target = Target { chat: ChatRef::new(ChatKind::Direct, "42"), thread_id: None };
        let html = BlockFormat { text_limit: 4000, markup: MarkupDialect::TelegramHtml, max_lines: None };
        let mut coalescer =
            Coalescer::new(OutboundScheduler::new(channel.clone()), target, "run", IDLE, html, HumanDelay::Off);
        coalescer.push("**Step 1** & done".into(), "\n\n").await;
        assert_eq!(coalescer.finish().await, BlocksOutcome::Delivered);
        assert_eq!(channel.sent_texts(), ["<b>Step 1</b> &amp; done"]);
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_pushed_means_nothing_sent() {
        let (channel, coalescer) = setup(HumanDelay::Off);
        assert_eq!(coalescer.finish().await, BlocksOutcome::NothingSent);
        assert!(channel.operations().is_empty());
    }
}
