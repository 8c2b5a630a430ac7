import { ISessionContext } from '@jupyterlab/apputils';
import { DocumentRegistry } from '@jupyterlab/docregistry';
import { INotebookModel, NotebookPanel } from '@jupyterlab/notebook';
import { IRenderMime, IRenderMimeRegistry, MimeModel } from '@jupyterlab/rendermime';
import { IDisposable } from '@lumino/disposable';
import { Panel, Widget } from '@lumino/widgets';

import { LIVE_MIME, LiveLaunchRenderer } from './live';
import { showRunningLaunches } from './reattach';
import { latestSnapshot } from './snapshots';

/** A launch output saved mid-launch: the widget reference the server moved out of the way. */
export const SAVED_MIME = 'application/vnd.notebook-launcher.saved-launch+json';
const WIDGET_MIME = 'application/vnd.jupyter.widget-view+json';
const WIDGET_ERROR = 'Error displaying widget';
/**
 * Shows a launch output that a notebook saved while the launch ran: its latest static form (the
 * final one when the launch has ended since — the server keeps it — else the newest the server has,
 * refreshed every second until the launch ends, else the saved one), and the live widget instead
 * once the notebook's widget renderer can draw it
 * (the kernel still has it: a page reloaded mid-launch, once the kernel answers). A widget that is
 * gone (the kernel died or was restarted, the launch ended) leaves the static form — never "Error
 * displaying widget" or a lasting "Loading widget...". The widget renderer does the drawing; this
 * watches it.
 */
export class SavedLaunchRenderer extends Panel implements IRenderMime.IRenderer {
  constructor(rendermime: IRenderMimeRegistry, session: ISessionContext) {
    super();
    this._rendermime = rendermime;
    this._session = session;
    this.addClass('nl-saved-launch');
    // the notebook's widget renderer is bound to its widget manager once the kernel is connected:
    // try the live widget again then
    session.statusChanged.connect(this._tryLive);
    session.kernelChanged.connect(this._tryLive);
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const latest = await latestSnapshot(model.metadata);
    this._clear();
    const data = { ...model.data, ...(latest ?? {}) } as IRenderMime.IMimeModel['data'];
    const type = 'text/html' in data ? 'text/html' : 'text/plain';
    // the static form follows the server's snapshots until the launch ends (a page reloaded while
    // the cell still waits on the launch: the kernel answers no widget request before it ends)
    this._static = new LiveLaunchRenderer(this._rendermime);
    this.addWidget(this._static);
    await this._static.renderModel(
      new MimeModel({ data: { [type]: data[type] }, trusted: model.trusted, metadata: model.metadata })
    );
    const saved = model.data[SAVED_MIME] as { model_id?: unknown } | undefined;
    const ended = latest?.state === 'final'; // no widget to look for
    this._modelId = model.trusted && !ended && typeof saved?.model_id === 'string' ? saved.model_id : '';
    this._tryLive();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._clear();
    this._session.statusChanged.disconnect(this._tryLive);
    this._session.kernelChanged.disconnect(this._tryLive);
    super.dispose();
  }

  /** Draw the live widget with the notebook's widget renderer, unless that renderer is the one tried. */
  private _tryLive = (): void => {
    const factory = this._rendermime.getFactory(WIDGET_MIME);
    if (!this._modelId || !factory || factory === this._triedWith || this._gone || this.isDisposed) {
      return;
    }
    this._triedWith = factory;
    this._dropLive();
    const live = this._rendermime.createRenderer(WIDGET_MIME) as Panel & IRenderMime.IRenderer;
    const holder = new Panel();
    holder.addWidget(live);
    holder.hide();
    this.addWidget(holder);
    this._holder = holder;
    const update = (): void => {
      const error = (live.node.textContent ?? '').startsWith(WIDGET_ERROR);
      const gone = live.isDisposed || live.isHidden || error;
      const drawn = !gone && live.widgets.length > 0;
      holder.setHidden(!drawn);
      this._static?.setHidden(drawn);
      if (gone) {
        this._gone = error || live.isHidden; // the kernel has no such widget: stop trying
        this._observer?.disconnect();
      }
    };
    this._observer = new MutationObserver(update);
    this._observer.observe(live.node, { childList: true, characterData: true, attributes: true });
    void live
      .renderModel(
        new MimeModel({
          data: { [WIDGET_MIME]: { version_major: 2, version_minor: 0, model_id: this._modelId } },
          trusted: true
        })
      )
      .then(update);
  };

  private _dropLive(): void {
    this._observer?.disconnect();
    this._observer = null;
    this._holder?.dispose();
    this._holder = null;
    this._static?.setHidden(false);
  }

  private _clear(): void {
    this._dropLive();
    this._static?.dispose();
    this._static = null;
    this._triedWith = null;
    this._gone = false;
    this._modelId = '';
  }

  private _rendermime: IRenderMimeRegistry;
  private _session: ISessionContext;
  private _static: (Widget & IRenderMime.IRenderer) | null = null;
  private _holder: Panel | null = null;
  private _observer: MutationObserver | null = null;
  private _triedWith: IRenderMime.IRendererFactory | null = null;
  private _modelId = '';
  private _gone = false;
}

/**
 * Adds the renderer to each notebook's own renderers (which hold that notebook's widget renderer),
 * as the notebook is made, before its outputs are drawn.
 */
export class SavedLaunchExtension implements DocumentRegistry.IWidgetExtension<NotebookPanel, INotebookModel> {
  createNew(panel: NotebookPanel): IDisposable {
    const rendermime = panel.content.rendermime;
    rendermime.addFactory(
      {
        safe: false,
        mimeTypes: [SAVED_MIME],
        createRenderer: () => new SavedLaunchRenderer(rendermime, panel.sessionContext)
      },
      10 // before the static form's text/html (50): the extension decides which to show
    );
    rendermime.addFactory(
      {
        safe: true, // what it draws goes through the static form's own renderer, trusted or not as the output
        mimeTypes: [LIVE_MIME],
        createRenderer: () => new LiveLaunchRenderer(rendermime)
      },
      20 // after the widget (0) where the page may draw it, before the static form's text/html (50)
    );
    void showRunningLaunches(panel); // a page opened after a launch of this notebook began
    return {
      isDisposed: false,
      dispose: () => {
        rendermime.removeMimeType(SAVED_MIME);
        rendermime.removeMimeType(LIVE_MIME);
      }
    };
  }
}
