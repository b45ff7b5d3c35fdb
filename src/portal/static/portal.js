// catraca portal: copy buttons and the charge page's live status. No framework, no build step.
(function () {
  document.addEventListener('click', function (ev) {
    var btn = ev.target.closest && ev.target.closest('[data-copy]');
    if (!btn) return;
    var el = document.querySelector(btn.getAttribute('data-copy'));
    if (!el) return;
    var text = el.value || el.textContent;
    var done = function () {
      var old = btn.textContent;
      btn.textContent = btn.getAttribute('data-copied') || 'OK';
      setTimeout(function () { btn.textContent = old; }, 1500);
    };
    if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(text).then(done, function () { el.select(); document.execCommand('copy'); done(); });
    else { el.select(); document.execCommand('copy'); done(); }
  });

  var charge = document.getElementById('charge');
  if (!charge || charge.getAttribute('data-status') !== 'ATIVA') return;
  var txid = charge.getAttribute('data-txid');
  var msgs = JSON.parse(charge.getAttribute('data-msgs'));
  var labels = JSON.parse(charge.getAttribute('data-labels'));
  var timer = setInterval(poll, 2000);
  function poll() {
    fetch('/topup/' + encodeURIComponent(txid) + '/status', { headers: { accept: 'application/json' }, credentials: 'same-origin' })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (s) {
        if (!s || s.status === 'ATIVA') return;
        clearInterval(timer);
        charge.setAttribute('data-status', s.status);
        var badge = charge.querySelector('[data-testid=charge-status]');
        badge.textContent = labels[s.status] || s.status;
        badge.className = 'badge s-' + s.status;
        charge.querySelector('[data-testid=charge-message]').textContent = msgs[s.status] || s.status;
        charge.querySelector('.pay').hidden = true;
        if (s.status === 'CONCLUIDA') {
          var nb = charge.querySelector('[data-testid=charge-balance]');
          nb.textContent = charge.getAttribute('data-balance-label').replace('{balance}', s.balance_display);
          nb.hidden = false;
          var hb = document.querySelector('[data-testid=header-balance] strong');
          if (hb) hb.textContent = s.balance_display;
        }
      })
      .catch(function () {});
  }
})();
