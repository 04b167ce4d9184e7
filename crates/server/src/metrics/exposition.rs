//! The Prometheus text exposition format (version 0.0.4), written by hand: `# HELP` and `# TYPE` once
//! per family, then its samples, label values escaped, histograms as cumulative `_bucket{le=…}` lines
//! ending in `+Inf`, then `_sum` and `_count`.

use std::fmt::Write;

/// The content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A sample value: integers are written exactly, floats with Rust's shortest round-trip form.
#[derive(Debug, Clone, Copy)]
pub enum Value {
    Int(i128),
    Float(f64),
}

impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::Int(i128::from(v))
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(i128::from(v))
    }
}

impl From<usize> for Value {
    fn from(v: usize) -> Value {
        Value::Int(v as i128)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Float(v)
    }
}

/// A histogram to write: upper bounds (without `+Inf`), per-bucket counts (not cumulative; one more
/// than the bounds, the last for everything above), and the sum of the observations.
pub struct Histogram<'a> {
    pub bounds: &'a [f64],
    pub counts: &'a [u64],
    pub sum: f64,
}

/// The text of one scrape, family by family.
#[derive(Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    /// Starts a family: its `# HELP` and `# TYPE` lines. Its samples follow.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) -> &mut Self {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {}", kind.as_str());
        self
    }

    /// One sample of the current family.
    pub fn sample(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        value: impl Into<Value>,
    ) -> &mut Self {
        self.out.push_str(name);
        self.labels(labels, None);
        match value.into() {
            Value::Int(v) => {
                let _ = writeln!(self.out, " {v}");
            }
            Value::Float(v) => {
                self.out.push(' ');
                push_float(&mut self.out, v);
                self.out.push('\n');
            }
        }
        self
    }

    /// A family of one unlabelled sample.
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, value: impl Into<Value>) {
        self.family(name, kind, help).sample(name, &[], value);
    }

    /// The `_bucket`, `_sum` and `_count` samples of one histogram of the current family.
    pub fn histogram(&mut self, name: &str, labels: &[(&str, &str)], histogram: &Histogram<'_>) {
        let mut cumulative = 0u64;
        let mut le = String::new();
        for (i, count) in histogram.counts.iter().enumerate() {
            cumulative = cumulative.saturating_add(*count);
            le.clear();
            match histogram.bounds.get(i) {
                Some(bound) => push_float(&mut le, *bound),
                None => le.push_str("+Inf"),
            }
            let _ = write!(self.out, "{name}_bucket");
            self.labels(labels, Some(&le));
            let _ = writeln!(self.out, " {cumulative}");
        }
        let _ = write!(self.out, "{name}_sum");
        self.labels(labels, None);
        self.out.push(' ');
        push_float(&mut self.out, histogram.sum);
        self.out.push('\n');
        let _ = write!(self.out, "{name}_count");
        self.labels(labels, None);
        let _ = writeln!(self.out, " {cumulative}");
    }

    pub fn finish(self) -> String {
        self.out
    }

    fn labels(&mut self, labels: &[(&str, &str)], le: Option<&str>) {
        if labels.is_empty() && le.is_none() {
            return;
        }
        self.out.push('{');
        let all = labels.iter().copied().chain(le.map(|le| ("le", le)));
        for (i, (name, value)) in all.enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            self.out.push_str(name);
            self.out.push_str("=\"");
            for c in value.chars() {
                match c {
                    '\\' => self.out.push_str("\\\\"),
                    '"' => self.out.push_str("\\\""),
                    '\n' => self.out.push_str("\\n"),
                    c => self.out.push(c),
                }
            }
            self.out.push('"');
        }
        self.out.push('}');
    }
}

fn push_float(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else {
        let _ = write!(out, "{v}");
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// One parsed sample line: metric name, labels, value.
    pub(crate) type Sample = (String, Vec<(String, String)>, f64);

    /// A strict parser of the subset of the text format we write, so tests can check every line.
    /// Panics with the offending line when one is not well-formed.
    pub(crate) fn parse(text: &str) -> Vec<(String, Kind, Vec<Sample>)> {
        let mut families: Vec<(String, Kind, Vec<Sample>)> = Vec::new();
        let mut pending_help: Option<String> = None;
        assert!(text.ends_with('\n'), "the text ends with a newline");
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').expect("HELP has a name and a text");
                assert!(!help.is_empty(), "{line}");
                assert!(pending_help.is_none(), "HELP without TYPE before {line}");
                assert!(
                    families.iter().all(|(n, _, _)| n != name),
                    "family {name} appears twice"
                );
                pending_help = Some(name.to_string());
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("TYPE has a name and a kind");
                assert_eq!(
                    pending_help.take().as_deref(),
                    Some(name),
                    "TYPE follows its HELP: {line}"
                );
                let kind = match kind {
                    "counter" => Kind::Counter,
                    "gauge" => Kind::Gauge,
                    "histogram" => Kind::Histogram,
                    other => panic!("unknown type {other}"),
                };
                if kind == Kind::Counter {
                    assert!(name.ends_with("_total"), "counter {name} ends with _total");
                }
                families.push((name.to_string(), kind, Vec::new()));
                continue;
            }
            assert!(!line.starts_with('#'), "unexpected comment {line}");
            let sample = parse_sample(line);
            let (family, kind, samples) = families.last_mut().expect("a sample after a TYPE");
            let name = &sample.0;
            let belongs = match kind {
                Kind::Histogram => [
                    format!("{family}_bucket"),
                    format!("{family}_sum"),
                    format!("{family}_count"),
                ]
                .contains(name),
                _ => name == family,
            };
            assert!(belongs, "sample {line} outside its family {family}");
            samples.push(sample);
        }
        assert!(pending_help.is_none(), "a HELP without TYPE at the end");
        families
    }

    fn is_name(name: &str) -> bool {
        let mut chars = name.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    }

    fn parse_sample(line: &str) -> Sample {
        let (head, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("no value: {line}"));
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value in {line}")),
        };
        let (name, labels) = match head.split_once('{') {
            None => (head, Vec::new()),
            Some((name, rest)) => {
                let body = rest
                    .strip_suffix('}')
                    .unwrap_or_else(|| panic!("unclosed labels: {line}"));
                let mut labels = Vec::new();
                let mut rest = body;
                while !rest.is_empty() {
                    let (label, after) = rest
                        .split_once("=\"")
                        .unwrap_or_else(|| panic!("bad label in {line}"));
                    assert!(is_name(label), "bad label name {label} in {line}");
                    let mut value = String::new();
                    let mut chars = after.char_indices();
                    let end = loop {
                        match chars.next() {
                            Some((_, '\\')) => match chars.next() {
                                Some((_, 'n')) => value.push('\n'),
                                Some((_, c @ ('\\' | '"'))) => value.push(c),
                                _ => panic!("bad escape in {line}"),
                            },
                            Some((i, '"')) => break i,
                            Some((_, c)) => value.push(c),
                            None => panic!("unterminated label value in {line}"),
                        }
                    };
                    labels.push((label.to_string(), value));
                    rest = &after[end + 1..];
                    rest = rest.strip_prefix(',').unwrap_or(rest);
                }
                (name, labels)
            }
        };
        assert!(is_name(name), "bad metric name in {line}");
        (name.to_string(), labels, value)
    }

    /// Checks every histogram: per label set, buckets ascending and cumulative, `+Inf` last and equal
    /// to `_count`.
    pub(crate) fn check_histograms(families: &[(String, Kind, Vec<Sample>)]) {
        for (family, kind, samples) in families {
            if *kind != Kind::Histogram {
                continue;
            }
            // Per label set (without `le`): its (le, cumulative count) buckets and its `_count`.
            type Series = (Vec<(String, String)>, Vec<(f64, f64)>, Option<f64>);
            let mut series: Vec<Series> = Vec::new();
            for (name, labels, value) in samples {
                let mut key: Vec<(String, String)> =
                    labels.iter().filter(|(l, _)| l != "le").cloned().collect();
                key.sort();
                let index = match series.iter().position(|(k, _, _)| *k == key) {
                    Some(i) => i,
                    None => {
                        series.push((key, Vec::new(), None));
                        series.len() - 1
                    }
                };
                if name.ends_with("_bucket") {
                    let le = labels
                        .iter()
                        .find(|(l, _)| l == "le")
                        .expect("a bucket has le");
                    let le = if le.1 == "+Inf" {
                        f64::INFINITY
                    } else {
                        le.1.parse().expect("le is a number")
                    };
                    series[index].1.push((le, *value));
                } else if name.ends_with("_count") {
                    series[index].2 = Some(*value);
                }
            }
            for (labels, buckets, count) in series {
                assert!(!buckets.is_empty(), "{family}{labels:?} has buckets");
                for pair in buckets.windows(2) {
                    assert!(pair[0].0 < pair[1].0, "{family}: le ascending");
                    assert!(pair[0].1 <= pair[1].1, "{family}: buckets cumulative");
                }
                let last = buckets.last().expect("buckets");
                assert_eq!(last.0, f64::INFINITY, "{family}: +Inf bucket last");
                assert_eq!(Some(last.1), count, "{family}: +Inf equals _count");
            }
        }
    }

    #[test]
    fn families_samples_and_escaping() {
        let mut e = Exposition::default();
        e.family("x_total", Kind::Counter, "Things.\nMore")
            .sample("x_total", &[("a", "q\"u\\o\nte")], 3u64)
            .sample("x_total", &[("a", "b")], 0u64);
        e.single("g", Kind::Gauge, "A gauge.", -2i64);
        e.single("f", Kind::Gauge, "A float.", 0.25f64);
        let text = e.finish();
        assert_eq!(
            text,
            "# HELP x_total Things.\\nMore\n# TYPE x_total counter\n\
             x_total{a=\"q\\\"u\\\\o\\nte\"} 3\nx_total{a=\"b\"} 0\n\
             # HELP g A gauge.\n# TYPE g gauge\ng -2\n\
             # HELP f A float.\n# TYPE f gauge\nf 0.25\n"
        );
        let families = parse(&text);
        assert_eq!(families[0].2[0].1[0].1, "q\"u\\o\nte");
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_at_inf() {
        let mut e = Exposition::default();
        e.family("h_seconds", Kind::Histogram, "Latency.");
        e.histogram(
            "h_seconds",
            &[("p", "0")],
            &Histogram {
                bounds: &[0.001, 0.5],
                counts: &[2, 0, 3],
                sum: 1.75,
            },
        );
        let text = e.finish();
        assert_eq!(
            text,
            "# HELP h_seconds Latency.\n# TYPE h_seconds histogram\n\
             h_seconds_bucket{p=\"0\",le=\"0.001\"} 2\n\
             h_seconds_bucket{p=\"0\",le=\"0.5\"} 2\n\
             h_seconds_bucket{p=\"0\",le=\"+Inf\"} 5\n\
             h_seconds_sum{p=\"0\"} 1.75\nh_seconds_count{p=\"0\"} 5\n"
        );
        check_histograms(&parse(&text));
    }
}
