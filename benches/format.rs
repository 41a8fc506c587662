//! Platform formatting throughput: a ~100 KB markdown reply (paragraphs with inline markup,
//! lists, quotes, tables, code blocks, text that needs escaping) rendered for each dialect and
//! split to that platform's limits. Target: at least 50 MB/s of markdown in.
//!
//! `render_and_split` is what a reply costs; `render` and `split` show where the time goes.
//! Run with `cargo bench --bench format`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};

use ferry::channel::MarkupDialect;
use ferry::reply::format::{render, split};

/// Each dialect with the limits of the platform that uses it (Telegram chunks at 4000 of its
/// 4096; Discord 2000 characters and 17 lines; Slack and the web chat at 4000 to exercise the
/// splitter).
const CASES: [(&str, MarkupDialect, usize, Option<usize>); 5] = [
    ("telegram_html", MarkupDialect::TelegramHtml, 4000, None),
    ("discord_markdown", MarkupDialect::DiscordMarkdown, 2000, Some(17)),
    ("slack_mrkdwn", MarkupDialect::SlackMrkdwn, 4000, None),
    ("plain", MarkupDialect::Plain, 4000, None),
    ("markdown", MarkupDialect::Markdown, 4000, None),
];

/// One section of a typical long answer, about 1.6 KB.
fn section(n: usize) -> String {
    format!(
        "## Step {n}: what changed\n\n\
         The **parser** now reads `Config<T>` lazily, so a missing file is reported *once* instead of \
         on every reload; see [the docs](https://example.com/docs?section={n}&lang=en) and ~~the old \
         workaround~~. Costs & limits: a < b > c, naïve café, 日本語, 😀.\n\n\
         - first, check the input\n- then **parse** it with `serde`\n  - nested detail {n}\n- finally report\n\n\
         1. build\n2. test\n3. ship\n\n\
         > Note: this keeps the <b>old</b> behaviour for <@U123> and everyone else.\n\n\
         | Field | Type | Default |\n|:------|:-----|--------:|\n| timeout | u64 | 600 |\n| retries | u8 | 3 |\n| name | String | \"ferry\" |\n\n\
         ```rust\nfn load(path: &Path) -> Result<Config, Error> {{\n    let text = std::fs::read_to_string(path)?;\n    \
         if text.len() > LIMIT && !allow_large {{\n        return Err(Error::TooLarge(text.len()));\n    }}\n    \
         toml::from_str(&text).map_err(Error::from)\n}}\n```\n\n\
         That is all for step {n}; the next one builds on it.\n\n"
    )
}

fn reply(target: usize) -> String {
    let mut text = String::new();
    let mut n = 1;
    while text.len() < target {
        text.push_str(&section(n));
        n += 1;
    }
    text
}

fn formatting(c: &mut Criterion) {
    let markdown = reply(100 * 1024);
    let mut group = c.benchmark_group("format");
    group.throughput(Throughput::Bytes(markdown.len() as u64));
    for (name, dialect, limit, max_lines) in CASES {
        group.bench_function(format!("render_and_split/{name}"), |b| {
            b.iter(|| split(&render(black_box(&markdown), dialect), dialect, limit, max_lines))
        });
    }
    for (name, dialect, _, _) in CASES {
        group.bench_function(format!("render/{name}"), |b| b.iter(|| render(black_box(&markdown), dialect)));
    }
    for (name, dialect, limit, max_lines) in CASES {
        let rendered = render(&markdown, dialect);
        group.bench_function(format!("split/{name}"), |b| {
            b.iter(|| split(black_box(&rendered), dialect, limit, max_lines))
        });
    }
    group.finish();
}

criterion_group!(benches, formatting);
criterion_main!(benches);
