// The audit report's page, part 1 of 3: reading the data blobs of this file, and the small helpers every part
// uses. page.py joins the three parts into one script, inside one function (adr/0023). No request is made: blobs
// are read from the page itself and inflated with DecompressionStream. Text from the log only ever reaches the page
// as text nodes, never as HTML.

// -- reading the blobs ------------------------------------------------------------------------------------
// A blob is zlib data written as windows-1252 text (relay_shell/report/blobs.py): each character is one byte,
// except bytes 0x80-0x9f, which windows-1252 shows as other characters, and four bytes escaped with "~".
var W1252 = "\u20ac\u0081\u201a\u0192\u201e\u2026\u2020\u2021\u02c6\u2030\u0160\u2039\u0152\u008d\u017d\u008f" +
  "\u0090\u2018\u2019\u201c\u201d\u2022\u2013\u2014\u02dc\u2122\u0161\u203a\u0153\u009d\u017e\u0178";
var HIGH = new Map();
for (var k = 0; k < W1252.length; k++) HIGH.set(W1252.charCodeAt(k), 0x80 + k);
var ESCAPED = [0x00, 0x0d, 0x3c, 0x7e];

function bytesOf(text) {
  var out = new Uint8Array(text.length);
  var n = 0;
  for (var i = 0; i < text.length; i++) {
    var c = text.charCodeAt(i);
    if (c === 0x7e) c = ESCAPED[text.charCodeAt(++i) - 48];
    else if (c > 0xff) c = HIGH.get(c);
    out[n++] = c;
  }
  return out.subarray(0, n);
}

async function inflate(id) {
  var node = document.getElementById(id);
  if (!node) throw new Error("no data block " + id);
  var stream = new Blob([bytesOf(node.textContent)]).stream().pipeThrough(new DecompressionStream("deflate"));
  return await new Response(stream).text();
}

async function blobJson(id) {
  return JSON.parse(await inflate(id));
}

// -- the data ---------------------------------------------------------------------------------------------
// A row: [id, start_ms, duration_ms, client, tool, hosts, tier, decision, outcome, exit, summary, groups, flags,
//         seq, note] (relay_shell/report/calls.py)
var ID = 0, TIME = 1, DURATION = 2, CLIENT = 3, TOOL = 4, HOSTS = 5, TIER = 6, DECISION = 7, OUTCOME = 8,
  EXIT = 9, SUMMARY = 10, GROUPS = 11, FLAGS = 12, SEQ = 13, NOTE = 14;
var PAGE = 100;
var meta = null, rows = [], names = null, idOf = new Map(), groups = new Map(), searchable = null;
var view = [], page = 0, sortColumn = TIME, sortDirection = 1;
var chunks = new Map();
var FLAG = {};

function el(tag, attributes) {
  var node = document.createElement(tag);
  if (attributes) {
    for (var name in attributes) {
      if (name === "text") node.textContent = attributes[name];
      else if (name === "className") node.className = attributes[name];
      else node.setAttribute(name, attributes[name]);
    }
  }
  for (var i = 2; i < arguments.length; i++) {
    var child = arguments[i];
    if (child === null || child === undefined) continue;
    node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

function when(ms) {
  if (ms === null || ms === undefined) return "";
  return new Date(ms).toISOString().replace("T", " ").slice(0, 23);
}

function took(ms) {
  if (ms === null || ms === undefined) return "";
  return ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(ms < 60000 ? 2 : 0) + " s";
}

function hostsOf(row) {
  return row[HOSTS].map(function (index) { return names.hosts[index]; }).join(", ");
}

function tag(outcome) {
  var known = ["ok", "exit_nonzero", "confirm_required", "gated", "timeout", "denied", "error", "cancelled",
    "interrupted", "unended"];
  return el("span", {className: "tag o-" + (known.indexOf(outcome) >= 0 ? outcome : "other"), text: outcome});
}
