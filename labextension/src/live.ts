import { IRenderMime, IRenderMimeRegistry, MimeModel } from '@jupyterlab/rendermime';
import { Panel, Widget } from '@lumino/widgets';

import { ISnapshot, latestSnapshot } from './snapshots';

/** Beside a running launch's widget: the page may show the server's latest snapshot instead. */
export const LIVE_MIME = 'application/vnd.notebook-launcher.live-launch+json';
/** How often a page that cannot draw the widget asks for the launch's latest static form. */
const REFRESH_MS = 1000;

/**
 * A running launch's output on a page that cannot draw its widget — a collaborator's, where the
 * output is not trusted, so the widget renderer is not used: the static form, replaced by the
 * latest one the server has every second until the launch ends (the kernel writes one every second
 * from its second second), so the reader follows the launch at most about 2 s behind.
 */
export class LiveLaunchRenderer extends Panel implements IRenderMime.IRenderer {
  constructor(rendermime: IRenderMimeRegistry) {
    super();
    this._rendermime = rendermime;
    this.addClass('nl-live-launch');
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    this._model = model;
    await this._show(model.data);
    this._schedule();
  }

  dispose(): void {
    window.clearTimeout(this._timer);
    super.dispose();
  }

  private _schedule(): void {
    const mark = this._model?.metadata?.notebook_launcher as { snapshot?: unknown } | undefined;
    if (!this.isDisposed && typeof mark?.snapshot === 'string') {
      this._timer = window.setTimeout(() => void this._refresh(), REFRESH_MS);
    }
  }

  private _refresh = async (): Promise<void> => {
    if (this.isDisposed || !this._model) {
      return;
    }
    const latest = await latestSnapshot(this._model.metadata);
    if (latest) {
      await this._show(latest);
    }
    if (latest?.state !== 'final') {
      this._schedule();
    }
  };

  /** Draw ``data``'s static form (HTML, else text) in place of the one shown, if it differs. */
  private async _show(data: ISnapshot): Promise<void> {
    const type = data['text/html'] !== undefined ? 'text/html' : 'text/plain';
    const text = data[type];
    if (this.isDisposed || !this._model || text === undefined || text === this._shown) {
      return;
    }
    const next = this._rendermime.createRenderer(type);
    await next.renderModel(
      new MimeModel({ data: { [type]: text }, trusted: this._model.trusted, metadata: this._model.metadata })
    );
    if (this.isDisposed) {
      next.dispose();
      return;
    }
    this._current?.dispose();
    this.addWidget(next);
    this._current = next;
    this._shown = text;
  }

  private _rendermime: IRenderMimeRegistry;
  private _model: IRenderMime.IMimeModel | null = null;
  private _current: Widget | null = null;
  private _shown: string | undefined;
  private _timer = 0;
}
