/* Behaviour every page shares, kept out of the HTML so the Content-Security-Policy allows no inline
   script: a <select data-autosubmit> submits its form when it changes (the language picker). */
(function () {
  "use strict";
  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target && target.matches && target.matches("select[data-autosubmit]") && target.form) {
      target.form.submit();
    }
  });
})();
