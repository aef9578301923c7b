// The dashboard's only script (the Content-Security-Policy allows no inline one): choosing a
// member in the header reloads the page on it. Without JavaScript the form's "go" button does.
document.addEventListener("DOMContentLoaded", () => {
  const choice = document.querySelector("#member-choice select");
  if (choice) {
    choice.addEventListener("change", () => choice.form.submit());
  }
});
