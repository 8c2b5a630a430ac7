/**
 * Ties the launch widget's tabs to their panes for assistive technology.
 *
 * ipywidgets' Tab draws a Lumino tab bar whose tabs name no panel and whose panes have no role, so a
 * screen reader hears "tab, 1 of 3" with nothing to go to (axe-core: tabs without `aria-controls`,
 * panes without `role="tabpanel"`). Each tab of a launch widget (`.nl-root`) here gets an id and
 * `aria-controls` naming its pane; each pane gets `role="tabpanel"` and `aria-labelledby` naming
 * its tab. The widget may draw or redraw its tabs at any time (ranks renumbered, a node placed), so
 * the page is watched and the ties made again, at most once a frame.
 *
 * Example: `new TabTies(document.body).start()`.
 */
export class TabTies {
  private observer: MutationObserver | null = null;
  private pending = false;
  private made = 0;

  constructor(private readonly root: HTMLElement) {}

  start(): void {
    this.observer = new MutationObserver(() => this.schedule());
    this.observer.observe(this.root, { childList: true, subtree: true });
    this.schedule();
  }

  stop(): void {
    this.observer?.disconnect();
    this.observer = null;
  }

  private schedule(): void {
    if (this.pending) {
      return;
    }
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.tieAll();
    });
  }

  /** Tie every launch widget's tabs to their panes (only attributes that differ are written). */
  tieAll(): void {
    for (const tabWidget of Array.from(this.root.querySelectorAll('.nl-root .widget-tab'))) {
      const tabs = Array.from(tabWidget.querySelectorAll(':scope > .widget-tab-bar .lm-TabBar-tab'));
      const contents = tabWidget.querySelector(':scope > .widget-tab-contents');
      const panes = contents === null ? [] : Array.from(contents.children);
      tabs.forEach((tab: Element, index: number) => {
        const pane = panes[index];
        if (pane === undefined) {
          return;
        }
        if (!tab.id) {
          tab.id = `nl-tab-${++this.made}`;
        }
        if (!pane.id) {
          pane.id = `${tab.id}-panel`;
        }
        setIfDiffers(tab, 'aria-controls', pane.id);
        setIfDiffers(pane, 'role', 'tabpanel');
        setIfDiffers(pane, 'aria-labelledby', tab.id);
      });
    }
  }
}

function setIfDiffers(element: Element, name: string, value: string): void {
  if (element.getAttribute(name) !== value) {
    element.setAttribute(name, value);
  }
}
