// The audit report's page, part 3 of 3: a call's page (its records, exec trace, fan-out, confirmation, session
// and transcript).

// -- a call's page ----------------------------------------------------------------------------------------
async function detailOf(index) {
  var number = Math.floor(index / meta.chunk);
  if (!chunks.has(number)) {
    if (chunks.size > 16) chunks.delete(chunks.keys().next().value);
    var calls = await blobJson("d" + number);
    var digests = bytesOf(document.getElementById("h" + number).textContent);
    digestsBack(calls, digests);
    chunks.set(number, calls);
  }
  return chunks.get(number)[index % meta.chunk];
}

function digestsBack(calls, digests) {
  // A chunk keeps its SHA-256 digests as raw bytes, in the order its records' `_digests` name the fields that
  // hold them (blobs.py).
  var next = 0;
  function hex() {
    var text = "";
    for (var i = next * 32; i < next * 32 + 32; i++) text += (digests[i] < 16 ? "0" : "") + digests[i].toString(16);
    next++;
    return text;
  }
  calls.forEach(function (records) {
    records.forEach(function (record) {
      (record._digests || []).forEach(function (name) {
        if (name === "execs.sha256") record.execs.sha256 = hex();
        else record[name] = hex();
      });
      delete record._digests;
    });
  });
}

function expand(records) {
  // A start record's fields that its end record repeats are listed in `_same` (blobs.py keeps them once).
  var end = records[records.length - 1];
  return records.map(function (record) {
    if (!record._same) return record;
    var whole = {};
    record._same.forEach(function (name) { whole[name] = end[name]; });
    for (var name in record) if (name !== "_same") whole[name] = record[name];
    return whole;
  });
}

function pretty(value) {
  return el("pre", {text: JSON.stringify(value, null, 2)});
}

function facts(pairs) {
  var list = el("dl", {className: "facts"});
  pairs.forEach(function (pair) {
    if (pair[1] === null || pair[1] === undefined || pair[1] === "") return;
    list.appendChild(el("dt", {text: pair[0]}));
    list.appendChild(el("dd", null, typeof pair[1] === "object" ? pair[1] : String(pair[1])));
  });
  return list;
}

function quoted(item) {
  if (typeof item !== "string") return JSON.stringify(item);
  return /^[\w@%+=:,.\/-]+$/.test(item) ? item : "'" + item.replace(/'/g, "'\\''") + "'";
}

function execLine(entry) {
  var outcome = entry.denied ? "DENIED" : entry.ok ? "ok" : (entry.error || "failed");
  var argv = Array.isArray(entry.argv) ? entry.argv.map(quoted).join(" ") : JSON.stringify(entry.argv);
  return el("span", {className: entry.denied ? "exec-denied" : ""},
    "+" + entry.t_ms + " ms  pid " + entry.pid + "  " + outcome + "  " + (entry.path || "(unreadable)") + ": ",
    el("code", {text: argv}));
}

function execTree(execs) {
  var entries = (execs.entries || []).filter(function (entry) { return entry && typeof entry === "object" &&
    "pid" in entry; });
  var items = entries.map(function (entry) { return {entry: entry, children: []}; });
  var roots = [];
  items.forEach(function (item, position) {
    var parent = null;
    for (var i = position - 1; i >= 0; i--) {
      if (items[i].entry.pid === item.entry.ppid) { parent = items[i]; break; }
    }
    (parent ? parent.children : roots).push(item);
  });
  function branch(list) {
    var ul = el("ul", {className: "tree"});
    list.forEach(function (item) {
      ul.appendChild(el("li", null, execLine(item.entry), item.children.length ? branch(item.children) : null));
    });
    return ul;
  }
  var heading = (execs.count || 0) + " exec(s), " + entries.length + " listed" +
    (execs.entries_omitted ? ", " + execs.entries_omitted + " not listed" : "") +
    ", " + (execs.not_found || 0) + " PATH misses, " + (execs.denied || 0) + " denied; sha256 " + execs.sha256;
  return el("div", {className: "execs"}, el("p", {className: "mono", text: heading}), branch(roots));
}

function hostTable(hosts) {
  var table = el("table", null, el("tr", null, el("th", {text: "host"}), el("th", {text: "status"}),
    el("th", {text: "address"}), el("th", {text: "user"}), el("th", {text: "host key"})));
  hosts.forEach(function (host) {
    table.appendChild(el("tr", null, el("td", {text: host.host || ""}), el("td", {text: host.status || ""}),
      el("td", {text: (host.address || "") + (host.port ? ":" + host.port : "")}), el("td", {text: host.user || ""}),
      el("td", {className: "mono", text: host.host_key || host.host_key_mode || ""})));
  });
  return table;
}

function digests(record) {
  var table = el("table", null, el("tr", null, el("th", {text: "what"}), el("th", {text: "SHA-256"}),
    el("th", {text: "bytes"})));
  [["returned to the client", "output_sha256", "output_len"], ["produced (every byte)", "raw_sha256", "raw_len"],
    ["stderr", "stderr_sha256", "stderr_len"]].forEach(function (names) {
    if (record[names[1]] === undefined) return;
    table.appendChild(el("tr", null, el("td", {text: names[0]}), el("td", {className: "mono", text: record[names[1]]}),
      el("td", {text: String(record[names[2]])})));
  });
  return table;
}

function related(row, index) {
  var found = [];
  (row[GROUPS] || []).concat([row[ID]]).forEach(function (key) {
    (groups.get(key) || []).forEach(function (other) { if (other !== index && found.indexOf(other) < 0) found.push(other); });
  });
  return found.sort(function (a, b) { return (rows[a][TIME] || 0) - (rows[b][TIME] || 0) || a - b; });
}

function relatedTable(list) {
  var table = el("table", null, el("tr", null, el("th", {text: "time"}), el("th", {text: "client"}),
    el("th", {text: "tool"}), el("th", {text: "what"}), el("th", {text: "outcome"})));
  list.forEach(function (index) {
    var row = rows[index];
    var link = el("a", {href: "#row=" + index, text: names.tools[row[TOOL]]});
    table.appendChild(el("tr", null, el("td", {text: when(row[TIME])}), el("td", {text: names.clients[row[CLIENT]]}),
      el("td", null, link), el("td", {className: "what", text: row[SUMMARY]}),
      el("td", null, tag(names.outcomes[row[OUTCOME]]))));
  });
  return table;
}

async function showCall(index) {
  var section = document.getElementById("call");
  var row = rows[index];
  if (!row) return;
  var records = expand(await detailOf(index));
  var last = records[records.length - 1];
  var parts = [el("p", null, el("a", {href: "#timeline", text: "\u2190 back to the timeline"})),
    el("h2", {text: names.tools[row[TOOL]] + "  " + row[ID]})];
  if (row[FLAGS] & (FLAG.trust | FLAG.copy)) parts.push(el("p", {className: "problem", text: row[NOTE]}));
  parts.push(facts([["started", when(row[TIME]) + " UTC"], ["client", names.clients[row[CLIENT]]],
    ["host(s)", hostsOf(row)], ["tier", row[TIER]], ["decision", names.decisions[row[DECISION]]],
    ["outcome", tag(names.outcomes[row[OUTCOME]])], ["duration", took(row[DURATION])], ["exit", row[EXIT]],
    ["reason", row[NOTE]], ["records (seq)", records.map(function (r) { return r.seq; }).join(", ")],
    ["request id", last.request_id], ["session", last.session_id]]));
  if (last.args !== undefined) parts.push(el("h3", {text: "Arguments as recorded (redacted)"}), pretty(last.args));
  if (last.output_sha256 !== undefined) parts.push(el("h3", {text: "Output digests"}), digests(last));
  records.forEach(function (record) {
    if (record.execs && typeof record.execs === "object") {
      parts.push(el("h3", {text: "Exec trace" + (record.tool === "exec:late" ? " (late)" : "")}),
        execTree(record.execs));
    }
  });
  var target = last.target || (records[0] || {}).target;
  if (target && Array.isArray(target.hosts)) parts.push(el("h3", {text: "Fan-out: per-host results"}),
    hostTable(target.hosts));
  else if (target) parts.push(el("h3", {text: "Target"}), pretty(target));
  var confirmations = records.filter(function (r) { return r.confirmation || r.phase === "confirm"; });
  var others = related(row, index);
  var shown = [];
  if (confirmations.length) {
    parts.push(el("h3", {text: "Tier-3 confirmation"}));
    records.filter(function (r) { return r.phase === "confirm"; }).forEach(function (r) {
      parts.push(el("p", {text: r.ts + ": " + r.tool + " " + (r.answer ? "answer " + r.answer : r.outcome)}));
    });
    shown = others.filter(function (other) {
      return (rows[other][GROUPS] || []).indexOf("confirm:" + confirmations[0].confirmation) >= 0;
    });
    if (shown.length) parts.push(el("p", {text: "Other calls with the same confirmation:"}), relatedTable(shown));
    parts.push(el("p", {className: "mono", text: "confirmation digest " + confirmations[0].confirmation}));
  }
  var session = last.session_id || (last.args || {}).session_id;
  if (session) {
    var members = others.filter(function (other) { return (rows[other][GROUPS] || []).indexOf(session) >= 0; });
    shown = shown.concat(members);
    parts.push.apply(parts, await sessionParts(session, members));
  }
  var rest = others.filter(function (other) { return shown.indexOf(other) < 0; });
  if (rest.length) parts.push(el("h3", {text: "Related records (late execs, a forward's events \u2026)"}),
    relatedTable(rest));
  var recordList = el("details", null, el("summary", {text: "The records as written (without v, prev, chain)"}));
  records.forEach(function (record) { recordList.appendChild(pretty(record)); });
  parts.push(el("h3", {text: "Records"}), recordList);
  section.replaceChildren.apply(section, parts);
  showing(true);
  section.scrollIntoView();
}

// -- sessions and their transcripts -----------------------------------------------------------------------
async function sessionParts(session, members) {
  var parts = [el("h3", {text: "Session " + session + ": its calls, typed lines and reads"}), relatedTable(members)];
  var transcript = meta.transcripts[session];
  if (!transcript) return parts;
  parts.push(el("h3", {text: "Transcript"}));
  var status = transcript.status;
  var file = transcript.uri ? el("a", {href: transcript.uri, text: transcript.path}) : null;
  if (status === "altered") {
    parts.push(el("p", {className: "problem", text: "The file does not match the digest its session:end record " +
      "carries (sha256 " + transcript.digest + "): it was altered or replaced. Not shown."}), file);
    return parts;
  }
  if (status !== "matched") {
    parts.push(el("p", {className: "muted", text: "Transcript " + status + "."}), file);
    return parts;
  }
  parts.push(el("p", null, "Matched by its SHA-256 " + transcript.digest + " (" + transcript.size + " bytes): ", file));
  if (!transcript.blob) {
    parts.push(el("p", {className: "muted", text: "Too large to embed in the report: open the file."}));
    return parts;
  }
  parts.push(player(await inflate(transcript.blob)));
  return parts;
}

function screenText(text) {
  // Terminal output as plain text: escape sequences removed, carriage returns resolved.
  text = text.replace(/\x1b\][^\x07\x1b]*(\x07|\x1b\\)/g, "").replace(/\x1b\[[0-9;?]*[ -\/]*[@-~]/g, "")
    .replace(/\x1b[()][0-9A-Za-z]|\x1b[=>78MDEc]/g, "").replace(/\r+\n/g, "\n");
  return text.split("\n").map(function (line) {
    var back = line.lastIndexOf("\r");
    return back >= 0 ? line.slice(back + 1) : line;
  }).join("\n").replace(/[\x00-\x08\x0b-\x1f\x7f]/g, "");
}

function player(cast) {
  var lines = cast.split("\n").filter(function (line) { return line.trim() !== ""; });
  var events = [];
  lines.slice(1).forEach(function (line) {
    try { var event = JSON.parse(line); if (Array.isArray(event)) events.push(event); } catch (error) { /* skip */ }
  });
  var screen = el("pre", {className: "player", "data-transcript": "1"});
  var output = events.filter(function (e) { return e[1] === "o"; }).map(function (e) { return e[2]; }).join("");
  screen.textContent = screenText(output);
  var typed = el("table", null, el("tr", null, el("th", {text: "at"}), el("th", {text: "typed (as the screen " +
    "showed it; input with echo off is never written)"})));
  events.filter(function (e) { return e[1] === "i"; }).forEach(function (e) {
    typed.appendChild(el("tr", null, el("td", {text: "+" + Number(e[0]).toFixed(2) + " s"}),
      el("td", {className: "mono typed", text: JSON.stringify(e[2])})));
  });
  var timer = null;
  function play(speed) {
    // Output events at their recorded pace (pauses capped at a second), `speed` times faster.
    clearTimeout(timer);
    var position = 0, shown = "";
    function step() {
      var now = events[position][0];
      while (position < events.length && events[position][0] - now <= 0.005) {
        if (events[position][1] === "o") shown += events[position][2];
        position++;
      }
      screen.textContent = screenText(shown);
      if (position < events.length) timer = setTimeout(step, Math.min((events[position][0] - now) * 1000 / speed, 1000));
    }
    if (events.length) step();
  }
  var controls = el("p", null, "Play: ");
  [1, 4, 16].forEach(function (speed) {
    var button = el("button", {type: "button", text: speed + "\u00d7"});
    button.addEventListener("click", function () { play(speed); });
    controls.appendChild(button);
    controls.appendChild(document.createTextNode(" "));
  });
  var whole = el("button", {type: "button", text: "whole text"});
  whole.addEventListener("click", function () { clearTimeout(timer); screen.textContent = screenText(output); });
  controls.appendChild(whole);
  return el("div", null, controls, screen, el("details", null, el("summary", {text: "Typed input"}), typed));
}
