/**
 * Ferry web chat: assistant text, which is untrusted Markdown, as sanitized DOM nodes (ES2020,
 * no build step). Two vendored libraries load before it from `/vendor/` (see vendor/README.md):
 * markdown-it renders, DOMPurify sanitizes what it renders. app.js, which loads after it, uses
 * `window.ferryMarkdown.render(text)` for one text and `.renderAll(texts)` for a history.
 */
"use strict";

window.ferryMarkdown = (() => {
  /**
   * Assistant text is untrusted Markdown. markdown-it renders it with raw HTML off (any tag the
   * model writes shows as text); DOMPurify then keeps only the tags listed here and http(s) or
   * mailto links, which open in a new tab with no opener and no referrer.
   */
  const markdown = window.markdownit({ html: false, linkify: true, breaks: true });
  // An image would fetch a URL the model chose as soon as the message shows: links only.
  markdown.disable("image");
  // Only links with a scheme: file names such as main.rs or setup.py are domain names too.
  markdown.linkify.set({ fuzzyLink: false });

  const escapeHtml = markdown.utils.escapeHtml;

  markdown.renderer.rules.fence = (tokens, index) => {
    const token = tokens[index];
    // A fence with nothing in it yet (a reply streaming "```", a stray one at the end of a
    // message) draws no empty box. A fence typed mid-line is inline code to markdown-it.
    if (!token.content.trim()) return "";
    const lang = token.info.trim().split(/\s+/)[0];
    const label = lang ? `<span class="code-lang">${escapeHtml(lang)}</span>` : "<span></span>";
    return `<div class="code"><div class="code-head">${label}<button type="button" class="copy-btn">Copy</button>` +
      `</div><pre><code>${escapeHtml(token.content.replace(/\n$/, ""))}</code></pre></div>`;
  };
  // Wide tables scroll inside the bubble instead of stretching it.
  markdown.renderer.rules.table_open = () => '<div class="table-wrap"><table>';
  markdown.renderer.rules.table_close = () => "</table></div>";

  const SANITIZE = {
    ALLOWED_TAGS: [
      "p", "br", "strong", "em", "s", "code", "pre", "a", "ul", "ol", "li", "blockquote", "hr",
      "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td",
      "div", "span", "button",
    ],
    ALLOWED_ATTR: ["href", "class", "start", "style", "type"],
    ALLOWED_URI_REGEXP: /^(?:https?:|mailto:)/i,
    RETURN_DOM_FRAGMENT: true,
  };
  // markdown-it writes `style` only for a table column's alignment; nothing else survives.
  DOMPurify.addHook("uponSanitizeAttribute", (_node, data) => {
    if (data.attrName === "style") data.keepAttr = /^text-align:(left|center|right)$/.test(data.attrValue);
  });
  DOMPurify.addHook("afterSanitizeAttributes", (node) => {
    if (node.tagName === "A" && node.hasAttribute("href")) {
      node.setAttribute("target", "_blank");
      node.setAttribute("rel", "noopener noreferrer");
    }
  });

  /** Assistant text as sanitized DOM nodes, ready to put in a bubble. */
  function renderMarkdown(source) {
    return DOMPurify.sanitize(markdown.render(source), SANITIZE);
  }

  /**
   * `renderMarkdown` for many texts (a history) in one sanitizer pass: DOMPurify's cost is
   * mostly per call (it parses a document each time), and one pass over 500 texts takes about
   * a third of 500 passes. Each text is wrapped in a `<div>` of its own; markdown-it, with raw
   * HTML off, writes only balanced tags, so the wrappers come back one per text.
   */
  function renderMarkdownAll(sources) {
    const html = sources.map((source) => `<div>${markdown.render(source)}</div>`).join("");
    const wrappers = [...DOMPurify.sanitize(html, SANITIZE).children];
    // Anything else would put a text in another's bubble: then one pass per text.
    if (wrappers.length !== sources.length) return sources.map(renderMarkdown);
    return wrappers.map((wrapper) => {
      const nodes = document.createDocumentFragment();
      nodes.append(...wrapper.childNodes);
      return nodes;
    });
  }

  return { render: renderMarkdown, renderAll: renderMarkdownAll };
})();
