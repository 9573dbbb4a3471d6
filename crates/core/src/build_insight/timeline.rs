//! The trace as a page people open: one self-contained HTML file (inline SVG and CSS, no script,
//! nothing fetched) with a lane for the driver's steps and one per job slot, each compile a bar
//! (its wait for memory before it, nvcc's phases under it, its file, time and peak on hover), and
//! the summary's tables below.

use super::build_summary::{dotted, percent, Summary};
use super::build_trace::BuildTrace;
use std::fmt::Write;

const WIDTH: f64 = 1200.0;
const LABEL: f64 = 120.0;
const LANE: f64 = 24.0;
const TOP: f64 = 28.0;

/// Colours by kind (Tableau 10).
fn colour(kind: &str) -> &'static str {
    match kind {
        "nvcc" => "#4e79a7",
        "c++" => "#59a14f",
        "link" => "#f28e2b",
        "wait" => "#e15759",
        _ => "#bab0ac",
    }
}

const ARCH_COLOURS: [&str; 6] = [
    "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#af7aa1",
];

/// Text for HTML and SVG.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A tick every 1, 2, 5, 10… seconds: about ten over `seconds`.
fn tick_step(seconds: f64) -> f64 {
    [
        1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
    ]
    .into_iter()
    .find(|s| seconds / s <= 12.0)
    .unwrap_or(7200.0)
}

/// The page for `trace` and its `summary`.
pub fn html(trace: &BuildTrace, summary: &Summary) -> String {
    let origin = trace.origin_ms();
    let span_s = (trace.end_ms().saturating_sub(origin) as f64 / 1000.0).max(0.001);
    let plot = WIDTH - LABEL - 10.0;
    let x = |ms: u64| LABEL + (ms.saturating_sub(origin) as f64 / 1000.0) / span_s * plot;
    let lanes = 1 + trace.slots();
    let height = TOP + lanes as f64 * LANE + 10.0;
    let archs: Vec<String> = summary.arch_costs.iter().map(|c| c.arch.clone()).collect();
    let arch_colour = |a: &str| {
        archs
            .iter()
            .position(|x| x == a)
            .map_or("#bab0ac", |i| ARCH_COLOURS[i % ARCH_COLOURS.len()])
    };
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    axis(&mut svg, span_s, height, trace.slots());
    for s in &trace.steps {
        bar(
            &mut svg,
            x(s.start_ms),
            x(s.end_ms),
            0,
            colour("step"),
            &s.name,
            &format!("{}: {:.1} s", s.name, s.seconds()),
        );
    }
    for j in &trace.jobs {
        job_bars(&mut svg, j, &x, &arch_colour);
    }
    svg.push_str("</svg>");
    page(trace, summary, &svg, &archs, arch_colour)
}

/// The time axis's ticks and the lanes' labels.
fn axis(svg: &mut String, span_s: f64, height: f64, slots: usize) {
    let plot = WIDTH - LABEL - 10.0;
    let step = tick_step(span_s);
    let mut t = 0.0;
    while t <= span_s {
        let tx = LABEL + t / span_s * plot;
        let _ = write!(
            svg,
            r##"<line x1="{tx:.1}" y1="{}" x2="{tx:.1}" y2="{height}" stroke="#ddd"/><text x="{tx:.1}" y="14" text-anchor="middle">{}</text>"##,
            TOP - 6.0,
            fmt_seconds(t)
        );
        t += step;
    }
    let mut lane_label = |i: usize, name: &str| {
        let y = TOP + i as f64 * LANE + LANE * 0.65;
        let _ = write!(svg, r#"<text x="4" y="{y:.1}">{}</text>"#, escape(name));
    };
    lane_label(0, "archsmith");
    for s in 0..slots {
        lane_label(s + 1, &format!("job slot {}", s + 1));
    }
}

/// One job: its wait for memory, its bar, and nvcc's phases along its foot.
fn job_bars(
    svg: &mut String,
    j: &super::build_trace::Job,
    x: &dyn Fn(u64) -> f64,
    arch_colour: &dyn Fn(&str) -> &'static str,
) {
    let lane = j.slot + 1;
    if j.waited_ms > 0 {
        bar(
            svg,
            x(j.span.start_ms.saturating_sub(j.waited_ms)),
            x(j.span.start_ms),
            lane,
            colour("wait"),
            "",
            &format!(
                "{} waited {:.1} s for memory",
                j.span.name,
                j.waited_ms as f64 / 1000.0
            ),
        );
    }
    let mut tip = format!("{} ({}): {:.1} s", j.path, j.span.kind, j.span.seconds());
    if let Some(p) = j.peak_rss_bytes {
        let _ = write!(tip, ", peak {:.2} GiB", p as f64 / (1u64 << 30) as f64);
    }
    let (x0, x1) = (x(j.span.start_ms), x(j.span.end_ms));
    bar(svg, x0, x1, lane, colour(&j.span.kind), &j.span.name, &tip);
    // nvcc's phases as a strip along the bar's foot, end to end (see trace.rs).
    let total: f64 = j.phases.iter().map(|p| p.ms).sum();
    if total > 0.0 {
        // Pixels per ms of the bar, or fewer where --threads ran phases at once.
        let scale = (x1 - x0) / total.max(j.span.seconds() * 1000.0);
        let mut px = x0;
        let y = TOP + lane as f64 * LANE + LANE - 7.0;
        for p in &j.phases {
            let w = p.ms * scale;
            let fill = p.device_arch().map_or("#888", |a| arch_colour(&a));
            let _ = write!(
                svg,
                r#"<rect x="{px:.1}" y="{y:.1}" width="{:.2}" height="4" fill="{fill}"><title>{}</title></rect>"#,
                w.max(0.2),
                escape(&format!(
                    "{} {}: {:.0} ms",
                    p.name,
                    p.arch.as_deref().unwrap_or(""),
                    p.ms
                ))
            );
            px += w;
        }
    }
}

fn fmt_seconds(t: f64) -> String {
    if t >= 60.0 {
        format!("{}:{:02}", (t / 60.0) as u64, (t % 60.0) as u64)
    } else {
        format!("{t:.0} s")
    }
}

/// One bar on `lane` from `x0` to `x1`, labelled inside when it fits.
fn bar(svg: &mut String, x0: f64, x1: f64, lane: usize, fill: &str, label: &str, tip: &str) {
    let y = TOP + lane as f64 * LANE + 2.0;
    let w = (x1 - x0).max(0.5);
    let _ = write!(
        svg,
        r#"<g><title>{}</title><rect x="{x0:.1}" y="{y:.1}" width="{w:.2}" height="{}" fill="{fill}" rx="2"/>"#,
        escape(tip),
        LANE - 4.0
    );
    if w > label.len() as f64 * 6.5 + 6.0 && !label.is_empty() {
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" fill="white">{}</text>"#,
            x0 + 3.0,
            y + 12.0,
            escape(label)
        );
    }
    svg.push_str("</g>");
}

fn page(
    trace: &BuildTrace,
    s: &Summary,
    svg: &str,
    archs: &[String],
    arch_colour: impl Fn(&str) -> &'static str,
) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>body{{font-family:sans-serif;margin:16px;color:#222}}table{{border-collapse:collapse;margin:8px 0 16px}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left}}th{{background:#f3f3f3}}.k{{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}}</style></head><body>\n<h2>{}</h2>\n<p>{:.1} s, {} compiles and links on {} job slot(s); {:.1} slot-seconds idle; {:.1} s waiting for memory.",
        escape(&trace.title),
        escape(&trace.title),
        s.wall_seconds,
        s.compiles,
        s.slots,
        s.idle_slot_seconds,
        s.waited_seconds
    );
    if let Some((f, b)) = &s.heaviest {
        let _ = write!(
            h,
            " Heaviest compile: {} at {:.2} GiB peak resident.",
            escape(f),
            *b as f64 / (1u64 << 30) as f64
        );
    }
    h.push_str("</p>\n<p>");
    for (k, name) in [
        ("step", "archsmith's steps"),
        ("nvcc", "nvcc"),
        ("c++", "C++"),
        ("link", "link"),
        ("wait", "waiting for memory"),
    ] {
        let _ = write!(
            h,
            r#"<span class="k" style="background:{}"></span>{name}"#,
            colour(k)
        );
    }
    for a in archs {
        let _ = write!(
            h,
            r#"<span class="k" style="background:{}"></span>{} phases"#,
            arch_colour(a),
            dotted(a)
        );
    }
    let _ = write!(h, "</p>\n{svg}\n");
    if !s.arch_costs.is_empty() {
        h.push_str("<h3>Cost of each arch</h3><table><tr><th>arch</th><th>device-compile s</th><th>of device time</th><th>image bytes</th><th>of the shared objects</th></tr>");
        for c in &s.arch_costs {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                dotted(&c.arch),
                c.device_seconds,
                percent(c.device_share),
                c.wheel_bytes,
                percent(c.wheel_share)
            );
        }
        let _ = write!(h, "</table><p>Device phases {:.1} s in all; host-side phases (cudafe++, the host compile, fatbinary) {:.1} s, whatever the archs.</p>", s.device_seconds, s.shared_seconds);
    }
    let list = |title: &str, rows: &[(String, f64)]| {
        let mut t = format!("<h3>{title}</h3><table>");
        for (n, secs) in rows {
            let _ = write!(t, "<tr><td>{}</td><td>{secs:.1} s</td></tr>", escape(n));
        }
        t.push_str("</table>");
        t
    };
    h.push_str(&list("Slowest", &s.slowest));
    h.push_str(&list("Critical path", &s.critical_path));
    h.push_str("\n</body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build_insight::build_trace::{Job, Span};

    #[test]
    fn the_page_draws_every_job_and_fetches_nothing() {
        let job = |name: &str, slot, start, end| Job {
            span: Span {
                name: name.into(),
                kind: "nvcc".into(),
                start_ms: start,
                end_ms: end,
            },
            path: format!("/t/{name}"),
            slot,
            waited_ms: 0,
            peak_rss_bytes: Some(1 << 30),
            reserved_bytes: None,
            reserved_from: None,
            phases: vec![],
            exit: 0,
        };
        let trace = BuildTrace {
            title: "build-ext <tinyext>".into(),
            steps: vec![Span {
                name: "prepare".into(),
                kind: "step".into(),
                start_ms: 0,
                end_ms: 1000,
            }],
            jobs: vec![job("a.cu", 0, 1000, 9000), job("b&c.cu", 1, 1000, 4000)],
        };
        let page = html(&trace, &Summary::of(&trace, &Default::default(), 0));
        assert_eq!(page.matches("<rect").count(), 3, "one bar per job and step");
        assert!(page.contains("b&amp;c.cu") && page.contains("build-ext &lt;tinyext&gt;"));
        for external in ["<script", "src=", "href=", "@import", "url("] {
            assert!(!page.contains(external), "{external}");
        }
        assert!(page.contains("job slot 2"));
    }
}
