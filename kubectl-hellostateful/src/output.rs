//! Output: aligned tables, ages and sizes as kubectl prints them, colours, JSON and YAML.

use std::borrow::Cow;
use std::fmt::Display;

use chrono::{DateTime, Utc};
use owo_colors::OwoColorize;
use serde::Serialize;

use crate::error::CliError;

/// Colours on or off (NO_COLOR, --no-color, or stdout not a terminal turn them off).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Style {
    pub color: bool,
}

impl Style {
    /// No colours at all.
    pub const PLAIN: Style = Style { color: false };

    pub fn good(&self, text: impl Display) -> String {
        self.paint(text, |t| t.green().to_string())
    }
    pub fn bad(&self, text: impl Display) -> String {
        self.paint(text, |t| t.red().to_string())
    }
    pub fn warn(&self, text: impl Display) -> String {
        self.paint(text, |t| t.yellow().to_string())
    }
    pub fn bold(&self, text: impl Display) -> String {
        self.paint(text, |t| t.bold().to_string())
    }
    pub fn dim(&self, text: impl Display) -> String {
        self.paint(text, |t| t.dimmed().to_string())
    }

    fn paint(&self, text: impl Display, paint: impl Fn(&str) -> String) -> String {
        let text = text.to_string();
        if self.color { paint(&text) } else { text }
    }
}

/// Text read from the cluster (names, messages, ids: anything a tenant may have written),
/// made safe to print on a terminal: each control character (C0 such as ESC, BEL, CR and
/// newline, DEL, and C1 such as CSI 0x9b) is shown escaped (`\u{1b}`, `\r`) instead of
/// reaching the terminal, where it could retitle the window, clear the screen or overwrite
/// a line; a tab becomes a space. Text without any is borrowed as it is. Colour after, not
/// before: the plugin's own colour codes would be escaped too.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.contains(unsafe_to_show) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\t' => shown.push(' '),
            c if unsafe_to_show(c) => shown.extend(c.escape_default()),
            c => shown.push(c),
        }
    }
    Cow::Owned(shown)
}

/// Control characters, and the bidirectional overrides and isolates that make a terminal
/// show text in another order than it is (so a message could read as another).
fn unsafe_to_show(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// [`printable`] for text laid out on several lines (error messages, a log's last lines):
/// its line breaks are kept, every other control character is escaped.
pub fn printable_lines(text: &str) -> Cow<'_, str> {
    if !text.contains(|c: char| unsafe_to_show(c) && c != '\n') {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.split('\n')
            .map(printable)
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

/// Age as kubectl prints it (`45s`, `5m30s`, `3h`, `2d5h`, `400d`, `3y20d`).
pub fn age(now: DateTime<Utc>, then: DateTime<Utc>) -> String {
    let seconds = (now - then).num_seconds();
    if seconds < 0 {
        return "0s".to_string();
    }
    human_duration(seconds as u64)
}

/// A duration in seconds the way kubectl's `HumanDuration` shortens it.
pub fn human_duration(seconds: u64) -> String {
    let minutes = seconds / 60;
    let hours = seconds / 3600;
    let days = hours / 24;
    let years = days / 365;
    if seconds < 120 {
        format!("{seconds}s")
    } else if minutes < 10 {
        match seconds % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        }
    } else if hours < 3 {
        format!("{minutes}m")
    } else if hours < 8 {
        match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        }
    } else if hours < 48 {
        format!("{hours}h")
    } else if days < 8 {
        match hours % 24 {
            0 => format!("{days}d"),
            h => format!("{days}d{h}h"),
        }
    } else if years < 2 {
        format!("{days}d")
    } else if years < 8 {
        match days % 365 {
            0 => format!("{years}y"),
            d => format!("{years}y{d}d"),
        }
    } else {
        format!("{years}y")
    }
}

/// Age of an RFC 3339 time, or `<unknown>` when it does not parse.
pub fn age_of(now: DateTime<Utc>, rfc3339: &str) -> String {
    match DateTime::parse_from_rfc3339(rfc3339) {
        Ok(then) => age(now, then.with_timezone(&Utc)),
        Err(_) => "<unknown>".to_string(),
    }
}

/// Bytes in binary units: `0B`, `999B`, `1.5KiB`, `12MiB`, `3.2GiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes}B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    // By the value as printed: 1048575 bytes rounds to 1024KiB, which is 1MiB.
    while value.round() >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if value < 10.0 {
        let rounded = (value * 10.0).round() / 10.0;
        if rounded >= 10.0 || rounded.fract() == 0.0 {
            format!("{:.0}{}", rounded, UNITS[unit])
        } else {
            format!("{:.1}{}", rounded, UNITS[unit])
        }
    } else {
        format!("{:.0}{}", value.round(), UNITS[unit])
    }
}

/// Milliseconds as `850ms`, `1.2s`, `2m3s`.
pub fn human_millis(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        human_duration(ms / 1000)
    }
}

/// Columns separated by three spaces, as kubectl's tabwriter does. Cells may hold colour
/// codes: widths count only visible characters.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let columns = headers.len();
    let mut widths: Vec<usize> = headers.iter().map(|h| visible_len(h)).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(columns) {
            widths[i] = widths[i].max(visible_len(cell));
        }
    }
    let mut out = String::new();
    let header_cells: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header_cells).chain(rows.iter()) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate().take(columns) {
            line.push_str(cell);
            if i + 1 < columns {
                line.push_str(&" ".repeat(widths[i] - visible_len(cell) + 3));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Characters shown, not counting ANSI escape sequences.
pub fn visible_len(text: &str) -> usize {
    let mut len = 0;
    let mut in_escape = false;
    for c in text.chars() {
        if in_escape {
            if c.is_ascii_alphabetic() {
                in_escape = false;
            }
        } else if c == '\u{1b}' {
            in_escape = true;
        } else {
            len += 1;
        }
    }
    len
}

/// JSON, pretty, with a final newline.
pub fn to_json<T: Serialize>(value: &T) -> Result<String, CliError> {
    serde_json::to_string_pretty(value)
        .map(|mut text| {
            text.push('\n');
            text
        })
        .map_err(|e| CliError::Failed(format!("cannot print JSON: {e}")))
}

/// YAML.
pub fn to_yaml<T: Serialize>(value: &T) -> Result<String, CliError> {
    serde_saphyr::to_string(value)
        .map(|mut text| {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text
        })
        .map_err(|e| CliError::Failed(format!("cannot print YAML: {e}")))
}

/// A Kubernetes `List` of objects, as `kubectl get -o json` prints several.
pub fn list_of(items: Vec<serde_json::Value>) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "List",
        "items": items,
        "metadata": {"resourceVersion": ""},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn ages_like_kubectl() {
        let now = Utc.with_ymd_and_hms(2026, 11, 29, 15, 0, 0).unwrap();
        let ago = |s: i64| age(now, now - chrono::Duration::seconds(s));
        assert_eq!(ago(0), "0s");
        assert_eq!(ago(45), "45s");
        assert_eq!(ago(119), "119s");
        assert_eq!(ago(120), "2m");
        assert_eq!(ago(330), "5m30s");
        assert_eq!(ago(3000), "50m");
        assert_eq!(ago(3 * 3600 + 60 * 5), "3h5m");
        assert_eq!(ago(10 * 3600), "10h");
        assert_eq!(ago(2 * 86400 + 5 * 3600), "2d5h");
        assert_eq!(ago(40 * 86400), "40d");
        assert_eq!(ago(3 * 365 * 86400 + 20 * 86400), "3y20d");
        assert_eq!(ago(-5), "0s");
        assert_eq!(age_of(now, "2026-11-29T14:59:00Z"), "60s");
        assert_eq!(age_of(now, "yesterday"), "<unknown>");
    }

    #[test]
    fn sizes_in_binary_units() {
        assert_eq!(human_bytes(0), "0B");
        assert_eq!(human_bytes(1023), "1023B");
        assert_eq!(human_bytes(1_048_576 * 1023), "1023MiB");
        assert_eq!(human_bytes(1_073_741_823), "1GiB");
        assert_eq!(human_bytes(1024), "1KiB");
        assert_eq!(human_bytes(1536), "1.5KiB");
        assert_eq!(human_bytes(10 * 1024 + 300), "10KiB");
        assert_eq!(human_bytes(5 * 1024 * 1024), "5MiB");
        assert_eq!(human_bytes(3_435_973_837), "3.2GiB");
        assert_eq!(human_bytes(1024 * 1024 - 1), "1MiB");
        assert_eq!(human_millis(850), "850ms");
        assert_eq!(human_millis(1250), "1.2s");
        assert_eq!(human_millis(125_000), "2m5s");
    }

    #[test]
    fn control_characters_from_the_cluster_are_shown_escaped() {
        assert_eq!(printable("\u{1b}]0;pwned\u{7}"), "\\u{1b}]0;pwned\\u{7}");
        assert_eq!(printable("\u{1b}[2J"), "\\u{1b}[2J");
        assert_eq!(printable("done\rfake"), "done\\rfake");
        assert_eq!(printable("\u{9b}2J"), "\\u{9b}2J");
        assert_eq!(printable("a\u{7f}b"), "a\\u{7f}b");
        assert_eq!(printable("one\ntwo"), "one\\ntwo");
        assert_eq!(printable("a\tb"), "a b");
        let text = printable("\u{1b}[31mred\u{9b}0m\r\n\u{0}\u{85}");
        assert!(!text.contains(char::is_control), "{text:?}");
    }

    #[test]
    fn ordinary_text_is_printed_as_it_is() {
        for text in [
            "",
            "backup 20261129T145500Z",
            "café é",
            "✔ done",
            "日本語",
            "a\\u{1b}",
        ] {
            assert!(
                matches!(printable(text), Cow::Borrowed(t) if t == text),
                "{text}"
            );
            assert!(
                matches!(printable_lines(text), Cow::Borrowed(t) if t == text),
                "{text}"
            );
        }
    }

    #[test]
    fn multi_line_text_keeps_its_line_breaks_only() {
        assert_eq!(printable_lines("one\n  two\n"), "one\n  two\n");
        assert_eq!(
            printable_lines("one\r\n\u{1b}[2Jtwo"),
            "one\\r\n\\u{1b}[2Jtwo"
        );
    }

    #[test]
    fn bidirectional_overrides_are_shown_escaped_not_obeyed() {
        assert_eq!(
            printable("ok\u{202e}deliaf\u{2066}x\u{2069}"),
            "ok\\u{202e}deliaf\\u{2066}x\\u{2069}"
        );
        assert_eq!(printable_lines("a\u{202d}\nb"), "a\\u{202d}\nb");
    }

    #[test]
    fn printing_twice_changes_nothing_more() {
        let once = printable("\u{1b}]0;x\u{7}\r\n").into_owned();
        assert_eq!(printable(&once), once);
    }

    #[test]
    fn tables_align_visible_text() {
        let style = Style { color: true };
        let rows = vec![
            vec!["a".to_string(), style.good("True"), "x".to_string()],
            vec!["longer".to_string(), "False".to_string(), String::new()],
        ];
        let text = table(&["NAME", "READY", "NOTE"], &rows);
        let plain: String = text
            .lines()
            .map(|l| {
                let mut s = String::new();
                let mut esc = false;
                for c in l.chars() {
                    if esc {
                        esc = !c.is_ascii_alphabetic();
                    } else if c == '\u{1b}' {
                        esc = true;
                    } else {
                        s.push(c);
                    }
                }
                s + "\n"
            })
            .collect();
        assert_eq!(
            plain,
            "NAME     READY   NOTE\na        True    x\nlonger   False\n"
        );
    }
}
