// Your numbers: what a learner types is kept in this browser's local storage.
//
// The build (felab/course/forms.py) writes each field with the value recorded in results/, if any,
// already in it, and that value in data-prefill. Here, a value the learner typed wins: it is
// shown instead, and kept under "felab:numbers:<lesson>:<field>". Emptying a field forgets the
// typed value, so the recorded one comes back on the next visit. The Day wrap-up page reads
// the same keys and offers every lesson's numbers as CSV.
(function () {
  "use strict";
  var PREFIX = "felab:numbers:";

  function load(key) {
    try { return window.localStorage.getItem(key); } catch (e) { return null; }
  }
  function save(key, value) {
    try {
      if (value === null) window.localStorage.removeItem(key);
      else window.localStorage.setItem(key, value);
      return true;
    } catch (e) { return false; }
  }
  function recorded(input) {
    try { return JSON.parse(input.getAttribute("data-prefill") || "null"); } catch (e) { return null; }
  }
  function note(m) {
    return "Filled from your run: " + (m.run || "the run of " + m.when) + " on " + m.target +
      (m.model ? " (" + m.model + ")" : "") + ", in " + m.file + "." + (m.note ? " " + m.note : "");
  }

  // ── A lesson page's form ──
  function setUpField(lesson, input) {
    var key = PREFIX + lesson + ":" + input.getAttribute("data-field");
    var status = document.getElementById(input.id + "-status");
    var m = recorded(input);
    var button = document.createElement("button");
    button.type = "button";
    button.className = "felab-use-recorded";
    button.hidden = true;
    button.textContent = m ? "Use the recorded " + m.value : "";
    status.insertAdjacentElement("afterend", button);

    function show(typed) {
      if (typed !== null) {
        status.textContent = "Your own entry, saved on this device." +
          (m && m.value !== typed ? " Your recorded run says " + m.value + "." : "");
        button.hidden = !m || m.value === typed;
      } else {
        status.textContent = m ? note(m) : "Nothing recorded for this yet: run the command, then type it.";
        button.hidden = true;
      }
    }
    var typed = load(key);
    if (typed !== null) input.value = typed;
    show(typed);

    input.addEventListener("input", function () {
      var value = input.value.trim() === "" ? null : input.value;
      if (!save(key, value)) {
        status.textContent = "This browser does not let the page keep it: write it down elsewhere.";
        return;
      }
      show(value);
    });
    button.addEventListener("click", function () {
      save(key, null);
      input.value = m.value;
      show(null);
      input.focus();
    });
  }

  // ── The wrap-up: every lesson's numbers, and the CSV ──
  function csvCell(text) {
    text = text == null ? "" : String(text);
    return /[",\n\r]/.test(text) ? '"' + text.replace(/"/g, '""') + '"' : text;
  }
  function setUpWrapUp(data) {
    var items = JSON.parse(data.textContent);
    var lines = [["lesson", "field", "label", "value", "source", "measured_at", "target"]];
    items.forEach(function (it) {
      var typed = load(PREFIX + it.lesson + ":" + it.field);
      var m = it.measured;
      var row = document.querySelector('tr[data-lesson="' + it.lesson + '"][data-field="' + it.field + '"]');
      var value = typed !== null ? typed : (m ? m.value : "");
      var source = typed !== null ? "typed" : (m ? "measured" : "");
      if (row) {
        row.querySelector(".felab-value").textContent = value;
        row.querySelector(".felab-source").textContent = typed !== null ? "typed on this device"
          : (m ? "measured " + m.when + " on " + m.target + (m.note ? " (" + m.note + ")" : "")
             : "not recorded yet");
      }
      lines.push([it.lesson, it.field, it.label, value, source,
                  typed === null && m ? m.when : "", typed === null && m ? m.target : ""]);
    });
    var csv = lines.map(function (l) { return l.map(csvCell).join(","); }).join("\n") + "\n";
    var area = document.getElementById("felab-csv");
    area.value = csv;
    document.getElementById("felab-csv-download").href =
      "data:text/csv;charset=utf-8," + encodeURIComponent(csv);
    var copy = document.getElementById("felab-csv-copy");
    var said = document.getElementById("felab-csv-said");
    copy.hidden = false;
    copy.addEventListener("click", function () {
      function byHand() {
        area.focus();
        area.select();
        var ok = false;
        try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
        said.textContent = ok ? "Copied." : "Selected: press Ctrl+C (Cmd+C on a Mac) to copy.";
      }
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(csv).then(function () { said.textContent = "Copied."; }, byHand);
      } else {
        byHand();
      }
    });
  }

  function start() {
    document.querySelectorAll("form.felab-numbers").forEach(function (form) {
      form.addEventListener("submit", function (e) { e.preventDefault(); });
      var lesson = form.getAttribute("data-lesson");
      form.querySelectorAll("input[data-field]").forEach(function (input) { setUpField(lesson, input); });
    });
    var data = document.getElementById("felab-all-numbers");
    if (data) setUpWrapUp(data);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
