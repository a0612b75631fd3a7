//! How results are printed, with rabbitmqctl's habits: an info line before a listing ("Listing
//! queues for vhost / ...") unless `-q`/`--quiet`; listings as tab-separated rows under a header
//! row (`--no-table-headers` drops it) or, with `--formatter json`, as one JSON array of objects
//! holding the requested columns.

use serde_json::{Map, Value};

/// `--formatter`: rabbitmqctl's names for the two that make sense over an HTTP API.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Formatter {
    /// Tab-separated columns (rabbitmqctl's `table` when piped).
    #[default]
    Table,
    /// The same rows in drawn boxes (rabbitmqctl's `pretty_table`), for a terminal.
    #[value(name = "pretty_table")]
    PrettyTable,
    /// A JSON array of objects, one per row.
    Json,
}

/// The output options given on the command line.
#[derive(Clone, Copy, Debug, Default)]
pub struct Format {
    pub formatter: Formatter,
    /// `-q`: no informational lines, only results.
    pub quiet: bool,
    /// `--no-table-headers`: rows only.
    pub no_headers: bool,
}

impl Format {
    /// The informational line for an operation (with a newline), or nothing when quiet or JSON.
    pub fn info(&self, text: &str) -> String {
        if self.quiet || self.formatter == Formatter::Json {
            String::new()
        } else {
            format!("{text}\n")
        }
    }

    /// `items` (a JSON array from the API) as rows of `columns` (`default` when none were asked
    /// for), after the info line `banner`.
    pub fn listing(&self, banner: &str, items: &Value, columns: &[String], default: &[&str]) -> String {
        let columns: Vec<&str> =
            if columns.is_empty() { default.to_vec() } else { columns.iter().map(String::as_str).collect() };
        let items = items.as_array().map(Vec::as_slice).unwrap_or_default();
        match self.formatter {
            Formatter::Json => {
                let rows: Vec<Value> = items.iter().map(|item| json_row(item, &columns)).collect();
                format!("{}\n", Value::Array(rows))
            }
            Formatter::PrettyTable => {
                let rows: Vec<Vec<String>> = items
                    .iter()
                    .map(|item| columns.iter().map(|column| text_cell(item, column)).collect())
                    .collect();
                let header: Vec<String> = columns.iter().map(|c| (*c).to_owned()).collect();
                let mut out = self.info(banner);
                out.push_str(&boxed((!self.no_headers).then_some(header.as_slice()), &rows));
                out
            }
            Formatter::Table => {
                let mut out = self.info(banner);
                if !self.no_headers {
                    out.push_str(&columns.join("\t"));
                    out.push('\n');
                }
                for item in items {
                    let cells: Vec<String> = columns.iter().map(|column| text_cell(item, column)).collect();
                    out.push_str(&cells.join("\t"));
                    out.push('\n');
                }
                out
            }
        }
    }

    /// Name/value pairs (status, environment): `name: value` lines, or one JSON object.
    pub fn pairs(&self, banner: &str, pairs: &[(&str, Value)]) -> String {
        match self.formatter {
            Formatter::Json => {
                let object: Map<String, Value> =
                    pairs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
                format!("{}\n", Value::Object(object))
            }
            Formatter::Table | Formatter::PrettyTable => {
                let mut out = self.info(banner);
                for (name, value) in pairs {
                    out.push_str(&format!("{name}: {}\n", plain(value)));
                }
                out
            }
        }
    }
}

/// Rows in drawn boxes, under `header` when given: a rule between every two rows, as
/// rabbitmqctl's `pretty_table` draws them.
fn boxed(header: Option<&[String]>, rows: &[Vec<String>]) -> String {
    let all: Vec<&[String]> = header.into_iter().chain(rows.iter().map(Vec::as_slice)).collect();
    let Some(first) = all.first() else { return String::new() };
    let widths: Vec<usize> =
        (0..first.len()).map(|i| all.iter().map(|row| row[i].chars().count()).max().unwrap_or(0)).collect();
    let rule = |left: &str, middle: &str, right: &str| {
        let bars: Vec<String> = widths.iter().map(|w| "─".repeat(w + 2)).collect();
        format!("{left}{}{right}\n", bars.join(middle))
    };
    let line = |row: &[String]| {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!(" {cell}{} ", " ".repeat(w - cell.chars().count())))
            .collect();
        format!("│{}│\n", cells.join("│"))
    };
    let mut out = rule("┌", "┬", "┐");
    for (at, row) in all.iter().enumerate() {
        if at > 0 {
            out.push_str(&rule("├", "┼", "┤"));
        }
        out.push_str(&line(row));
    }
    out.push_str(&rule("└", "┴", "┘"));
    out
}

/// The requested columns of one item, as a JSON object.
fn json_row(item: &Value, columns: &[&str]) -> Value {
    let row: Map<String, Value> = columns.iter().map(|c| ((*c).to_owned(), column(item, c))).collect();
    Value::Object(row)
}

/// A column by rabbitmqctl's name, mapped to the API's field where they differ.
fn column(item: &Value, name: &str) -> Value {
    match name {
        "source_name" => item["source"].clone(),
        "destination_name" => item["destination"].clone(),
        "destination_kind" => item["destination_type"].clone(),
        "source_kind" => Value::from("exchange"),
        // list_consumers: the queue's name; the channel's name stands for rabbitmqctl's pid.
        "queue_name" if item.get("queue_name").is_none() => item["queue"]["name"].clone(),
        "channel_pid" => item["channel_details"]["name"].clone(),
        // list_channels: the connection's name.
        "connection" if item["connection_details"].is_object() => item["connection_details"]["name"].clone(),
        // Nested fields by path, e.g. `queue.name`, `channel_details.name`.
        other => other.split('.').fold(item, |value, key| &value[key]).clone(),
    }
}

fn text_cell(item: &Value, name: &str) -> String {
    plain(&column(item, name))
}

/// A value as rabbitmqctl prints it in a table: strings bare, lists in brackets.
fn plain(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Array(a) => {
            let parts: Vec<String> =
                a.iter().map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned)).collect();
            format!("[{}]", parts.join(", "))
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A listing has a header row and the info line, which -q drops and JSON never has.
    #[test]
    fn listings_have_headers_and_formats() {
        let items = json!([{"name": "q", "messages": 3, "queue": {"name": "inner"}}]);
        let table = Format::default();
        assert_eq!(
            table.listing("Listing queues ...", &items, &[], &["name", "messages"]),
            "Listing queues ...\nname\tmessages\nq\t3\n"
        );
        let quiet = Format { quiet: true, ..Format::default() };
        assert_eq!(
            quiet.listing("Listing queues ...", &items, &[], &["name", "messages"]),
            "name\tmessages\nq\t3\n"
        );
        let bare = Format { quiet: true, no_headers: true, ..Format::default() };
        assert_eq!(bare.listing("x", &items, &["queue.name".to_owned()], &[]), "inner\n");
        let pretty = Format { formatter: Formatter::PrettyTable, quiet: true, ..Format::default() };
        assert_eq!(
            pretty.listing("x", &items, &[], &["name", "messages"]),
            "┌──────┬──────────┐\n│ name │ messages │\n├──────┼──────────┤\n│ q    │ 3        │\n└──────┴──────────┘\n"
        );
        let json = Format { formatter: Formatter::Json, ..Format::default() };
        let out: Value =
            serde_json::from_str(&json.listing("x", &items, &[], &["name", "messages"])).unwrap();
        assert_eq!(out, json!([{"name": "q", "messages": 3}]));
    }
}
