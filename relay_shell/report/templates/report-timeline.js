// The audit report's page, part 2 of 3: the timeline (filters, sorting, pages) and navigation.

// -- the timeline -----------------------------------------------------------------------------------------
function fillSelect(id, values, labels) {
  var select = document.getElementById(id);
  var order = values.map(function (_, index) { return index; });
  order.sort(function (a, b) { return String(labels[a]).localeCompare(String(labels[b])); });
  order.forEach(function (index) {
    select.appendChild(el("option", {value: String(values[index]), text: labels[index]}));
  });
}

function textOf(index) {
  if (searchable === null) {
    searchable = rows.map(function (row) {
      return [row[ID], names.clients[row[CLIENT]], names.tools[row[TOOL]], hostsOf(row), names.outcomes[row[OUTCOME]],
        names.decisions[row[DECISION]], row[SUMMARY], (row[GROUPS] || []).join(" "), row[NOTE] || "",
        row[EXIT] === null ? "" : String(row[EXIT])].join("\n").toLowerCase();
    });
  }
  return searchable[index];
}

function value(id) {
  return document.getElementById(id).value;
}

function filter() {
  var client = value("f-client"), tool = value("f-tool"), host = value("f-host"), tier = value("f-tier");
  var outcome = value("f-outcome"), kind = value("f-kind"), text = value("f-text").trim().toLowerCase();
  var bit = kind === "" ? 0 : FLAG[kind];
  var found = [];
  for (var i = 0; i < rows.length; i++) {
    var row = rows[i];
    if (client !== "" && row[CLIENT] !== +client) continue;
    if (tool !== "" && row[TOOL] !== +tool) continue;
    if (host !== "" && row[HOSTS].indexOf(+host) < 0) continue;
    if (tier !== "" && row[TIER] !== +tier) continue;
    if (outcome !== "" && row[OUTCOME] !== +outcome) continue;
    if (bit && !(row[FLAGS] & bit)) continue;
    if (text && textOf(i).indexOf(text) < 0) continue;
    found.push(i);
  }
  view = found;
  sort();
  page = 0;
  render();
}

function sortKey(row, column) {
  if (column === CLIENT) return names.clients[row[CLIENT]];
  if (column === TOOL) return names.tools[row[TOOL]];
  if (column === OUTCOME) return names.outcomes[row[OUTCOME]];
  if (column === DECISION) return names.decisions[row[DECISION]];
  if (column === HOSTS) return hostsOf(row);
  return row[column];
}

function sort() {
  var column = sortColumn, direction = sortDirection;
  view.sort(function (a, b) {
    var x = sortKey(rows[a], column), y = sortKey(rows[b], column);
    if (x === y || (x === null && y === null)) return a - b;
    if (x === null || x === undefined) return 1;
    if (y === null || y === undefined) return -1;
    if (typeof x === "number" && typeof y === "number") return (x - y) * direction || a - b;
    return String(x).localeCompare(String(y)) * direction || a - b;
  });
  document.querySelectorAll("th button").forEach(function (button) {
    var on = +button.dataset.sort === column;
    button.className = on ? (direction > 0 ? "sorted-up" : "sorted-down") : "";
  });
}

function render() {
  var body = document.getElementById("t-body");
  var pages = Math.max(1, Math.ceil(view.length / PAGE));
  page = Math.min(Math.max(page, 0), pages - 1);
  var fragment = document.createDocumentFragment();
  view.slice(page * PAGE, (page + 1) * PAGE).forEach(function (index) {
    fragment.appendChild(tableRow(index));
  });
  body.replaceChildren(fragment);
  document.getElementById("p-where").textContent = "page " + (page + 1) + " of " + pages;
  document.getElementById("t-status").textContent = view.length + " of " + rows.length +
    " rows match. Click a row for the call's page.";
}

function tableRow(index) {
  var row = rows[index];
  var what = el("td", {className: "what"}, row[SUMMARY]);
  if (row[NOTE]) what.appendChild(el("div", {className: "muted", text: row[NOTE]}));
  var bad = row[FLAGS] & (FLAG.trust | FLAG.copy);
  var tr = el("tr", {className: "row-link" + (bad ? " bad" : row[FLAGS] ? " flagged" : ""), "data-row": index},
    el("td", {text: when(row[TIME])}), el("td", {text: names.clients[row[CLIENT]]}),
    el("td", {text: names.tools[row[TOOL]]}), el("td", {text: hostsOf(row)}), el("td", {text: String(row[TIER])}),
    el("td", {text: names.decisions[row[DECISION]]}), el("td", null, tag(names.outcomes[row[OUTCOME]])),
    el("td", {text: took(row[DURATION])}), el("td", {text: row[EXIT] === null ? "" : String(row[EXIT])}), what);
  tr.addEventListener("click", function () { location.hash = "row=" + index; });
  return tr;
}

// -- navigation -------------------------------------------------------------------------------------------
function showing(call) {
  // A call's page takes the place of the summary, the exceptions and the timeline; the banner stays above it.
  document.getElementById("call").hidden = !call;
  ["summary", "exceptions", "timeline"].forEach(function (id) { document.getElementById(id).hidden = call; });
}

function route() {
  var hash = decodeURIComponent(location.hash.slice(1));
  var section = document.getElementById("call");
  var match = /^(call|row|find|kind)=(.*)$/.exec(hash);
  if (!match) {
    showing(false);
    var target = hash && document.getElementById(hash);
    if (target) target.scrollIntoView();
    return;
  }
  if (match[1] === "find" || match[1] === "kind") {
    showing(false);
    document.getElementById(match[1] === "find" ? "f-text" : "f-kind").value = match[2];
    filter();
    document.getElementById("timeline").scrollIntoView();
    return;
  }
  var index = match[1] === "row" ? +match[2] : idOf.get(match[2]);
  if (index === undefined || !rows[index]) return;
  showCall(index).catch(function (error) {
    section.replaceChildren(el("p", {className: "problem", text: "This call's page could not be shown: " + error}));
    showing(true);
  });
}

async function start() {
  meta = await blobJson("meta");
  rows = await blobJson("rows");
  names = meta.names;
  meta.kinds.forEach(function (kind, index) { FLAG[kind[0]] = 1 << index; });
  var time = 0, seq = 0;
  rows.forEach(function (row, index) {
    // Times and seqs are differences from the previous row's (calls.py).
    if (row[TIME] !== null) row[TIME] = time += row[TIME];
    if (row[SEQ] !== null) row[SEQ] = seq += row[SEQ];
    if (!idOf.has(row[ID])) idOf.set(row[ID], index);
    (row[GROUPS] || []).forEach(function (key) {
      if (!groups.has(key)) groups.set(key, []);
      groups.get(key).push(index);
    });
  });
  fillSelect("f-client", names.clients.map(function (_, i) { return i; }), names.clients);
  fillSelect("f-tool", names.tools.map(function (_, i) { return i; }), names.tools);
  fillSelect("f-host", names.hosts.map(function (_, i) { return i; }), names.hosts);
  fillSelect("f-outcome", names.outcomes.map(function (_, i) { return i; }), names.outcomes);
  var kindSelect = document.getElementById("f-kind");
  meta.kinds.forEach(function (kind) { kindSelect.appendChild(el("option", {value: kind[0], text: kind[1]})); });
  var form = document.getElementById("filters");
  form.addEventListener("input", filter);
  form.addEventListener("change", filter);
  form.addEventListener("submit", function (event) { event.preventDefault(); });
  form.addEventListener("reset", function () { setTimeout(filter, 0); });
  document.querySelectorAll("th button").forEach(function (button) {
    button.addEventListener("click", function () {
      var column = +button.dataset.sort;
      sortDirection = column === sortColumn ? -sortDirection : 1;
      sortColumn = column;
      sort();
      page = 0;
      render();
    });
  });
  [["p-first", function () { page = 0; }], ["p-prev", function () { page--; }], ["p-next", function () { page++; }],
    ["p-last", function () { page = Infinity; }]].forEach(function (pair) {
    document.getElementById(pair[0]).addEventListener("click", function () { pair[1](); render(); });
  });
  window.addEventListener("hashchange", route);
  filter();
  route();
  performance.mark("report-ready");
  document.body.setAttribute("data-ready", "1");
}

start().catch(function (error) {
  document.getElementById("t-status").textContent = "The timeline could not be loaded: " + error;
  document.body.setAttribute("data-ready", "error");
});
