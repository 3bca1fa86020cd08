// The inspector's only script: a confirmation before destructive forms. Every page
// works without it (erasing a user has its own confirmation page).
"use strict";
document.addEventListener("submit", (event) => {
  const form = event.target;
  const question = form instanceof HTMLFormElement ? form.dataset.confirm : undefined;
  if (question && !window.confirm(question)) {
    event.preventDefault();
  }
});
