//! Markdown tables as aligned monospace text. No chat platform renders markdown tables, so
//! every dialect shows them as a preformatted block (a code block on Discord and Slack, a
//! `<pre>` on Telegram, indented text in plain) laid out here.
//!
//! Widths count `char`s: wide characters (CJK, most emoji) take two cells in a monospace
//! font, so columns holding them line up only approximately.

use pulldown_cmark::{Alignment, Event, Tag};

/// Collects a table's cells from parser events (between `Start(Table)` and `End(Table)`),
/// keeping only their text: inline markup inside a cell cannot be shown in a code block.
pub(super) struct TableBuilder {
    alignments: Vec<Alignment>,
    rows: Vec<Vec<String>>,
    /// Rows that belong to the header (followed by a rule).
    header_rows: usize,
}

impl TableBuilder {
    pub(super) fn new(alignments: Vec<Alignment>) -> Self {
        Self { alignments, rows: Vec::new(), header_rows: 0 }
    }

    /// Feeds one event from inside the table.
    pub(super) fn event(&mut self, event: &Event<'_>) {
        match event {
            Event::Start(Tag::TableHead) => {
                self.rows.push(Vec::new());
                self.header_rows = self.rows.len();
            }
            Event::Start(Tag::TableRow) => self.rows.push(Vec::new()),
            Event::Start(Tag::TableCell) => {
                if let Some(row) = self.rows.last_mut() {
                    row.push(String::new());
                }
            }
            Event::Text(text) | Event::Code(text) | Event::InlineHtml(text) | Event::Html(text) => self.push(text),
            Event::SoftBreak | Event::HardBreak => self.push(" "),
            Event::TaskListMarker(done) => self.push(if *done { "[x] " } else { "[ ] " }),
            _ => {}
        }
    }

    fn push(&mut self, text: &str) {
        if let Some(cell) = self.rows.last_mut().and_then(|row| row.last_mut()) {
            cell.push_str(text);
        }
    }

    /// The table as lines of aligned columns separated by ` | `, with a rule under the
    /// header; no trailing newline and no trailing spaces.
    pub(super) fn layout(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut widths = vec![0; columns];
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.trim().chars().count());
            }
        }
        let mut lines = Vec::with_capacity(self.rows.len() + 1);
        for (index, row) in self.rows.iter().enumerate() {
            let cells = widths.iter().enumerate().map(|(column, &width)| {
                let cell = row.get(column).map_or("", |cell| cell.trim());
                let alignment = self.alignments.get(column).copied().unwrap_or(Alignment::None);
                pad(cell, width, alignment)
            });
            lines.push(cells.collect::<Vec<_>>().join(" | ").trim_end().to_owned());
            if index + 1 == self.header_rows {
                lines.push(widths.iter().map(|&width| "-".repeat(width)).collect::<Vec<_>>().join("-|-"));
            }
        }
        lines.join("\n")
    }
}

fn pad(cell: &str, width: usize, alignment: Alignment) -> String {
    let space = width.saturating_sub(cell.chars().count());
    let (left, right) = match alignment {
        Alignment::Right => (space, 0),
        Alignment::Center => (space / 2, space - space / 2),
        Alignment::Left | Alignment::None => (0, space),
    };
    format!("{}{cell}{}", " ".repeat(left), " ".repeat(right))
}

#[cfg(test)]
mod tests {
    use pulldown_cmark::{Options, Parser, TagEnd};

    use super::*;

    fn layout(markdown: &str) -> String {
        let mut builder = None;
        for event in Parser::new_ext(markdown, Options::ENABLE_TABLES) {
            match event {
                Event::Start(Tag::Table(alignments)) => builder = Some(TableBuilder::new(alignments)),
                Event::End(TagEnd::Table) => return builder.map(|b| b.layout()).unwrap_or_default(),
                event => {
                    if let Some(builder) = builder.as_mut() {
                        builder.event(&event);
                    }
                }
            }
        }
        panic!("no table in {markdown:?}");
    }

    #[test]
    fn columns_are_aligned_as_the_markdown_asks() {
        let table = "| Name | Qty | Note |\n|:-----|----:|:----:|\n| apple | 3 | ripe |\n| kiwi | 12 | **a** |";
        assert_eq!(layout(table), "Name  | Qty | Note\n------|-----|-----\napple |   3 | ripe\nkiwi  |  12 |  a");
    }

    #[test]
    fn cells_keep_only_their_text_and_missing_cells_are_blank() {
        let table = "| a | b |\n|---|---|\n| `x` [l](https://e.io) |\n";
        assert_eq!(layout(table), "a   | b\n----|--\nx l |");
    }
}
