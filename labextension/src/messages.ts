/**
 * Messages between the sidebar and the kernel over the `notebook_launcher` comm.
 * Mirrors notebook_launcher/frontend/messages.py; change both together.
 *
 * Everything that arrives from the kernel goes through `parseKernelMsg`, which checks the shape
 * and returns null for anything else, so the panel never works on a cast it has not checked.
 */

export const COMM_TARGET = 'notebook_launcher';

export interface ISettings {
  num_processes: number | null;
  start_method: string;
  mixed_precision: string;
}

export interface IGpu {
  index: number;
  name: string;
  memory_mib: number | null;
}

export interface IInventory {
  cpu: { count: number };
  cuda: IGpu[];
  tpu: { cores: number; type: string | null };
  device: string;
  max_processes: number;
  default_processes: number;
}

export interface ILaunchInfo {
  id: string;
  ranks: number[];
  rank_status: { [rank: string]: string };
  status: string;
  elapsed: number;
  device: string;
  start_method: string;
  cell: number | null;
  waited_on: boolean;
  attempt: number;
  kind: string;
  places: { [rank: string]: string };
}

/** One line of a backend's section (`backends/status.py`). */
export interface IStatusRow {
  text: string;
  /** "item" (a listed thing), "note", "warn" or "error". */
  style: string;
  /** What the row is ("node", "free", ...): a lower-case word, or "". */
  key: string;
  /** A tooltip, or "". */
  hint: string;
}

/** A button of a backend's section: `id` goes back to the kernel when it is clicked. */
export interface IStatusAction {
  id: string;
  label: string;
}

/** A backend's sidebar section, drawn the same whatever the backend. */
export interface IStatusSection {
  /** A heading, or "" for a one-line section. */
  title: string;
  /** "ok", "busy", "idle", "off", "warn" or "error". */
  state: string;
  rows: IStatusRow[];
  actions: IStatusAction[];
}

/** Kernel → front end. */
export interface IStateMsg {
  type: 'state';
  history: number;
  inventory: IInventory;
  settings: ISettings;
  choices: { start_method: string[]; mixed_precision: string[] };
  launches: ILaunchInfo[];
  /** Each loaded backend's sections by name, in order; null: nothing to show now. */
  sections: { [name: string]: IStatusSection | null };
}

export interface IReplyMsg {
  type: 'reply';
  request_id: string | null;
  ok: boolean;
  error: string | null;
  settings: ISettings;
}

export interface ILaunchMsg {
  type: 'launch';
  launch: ILaunchInfo;
}

export interface ISettingsMsg {
  type: 'settings';
  settings: ISettings;
}

/** A backend's section changed. */
export interface ISectionMsg {
  type: 'section';
  name: string;
  section: IStatusSection | null;
}

export interface IHelloMsg {
  type: 'hello';
}

export type KernelMsg =
  | IStateMsg
  | IReplyMsg
  | ILaunchMsg
  | ISettingsMsg
  | ISectionMsg
  | IHelloMsg;

/** Front end → kernel. */
export interface IGetStateMsg {
  type: 'get_state';
  /** The page (browser tab) the sidebar is on, kept across its reloads (`pageId`). */
  page?: string;
}

export interface ISetSettingsMsg {
  type: 'set_settings';
  request_id: string;
  settings: Partial<ISettings>;
}

export interface IStopLaunchMsg {
  type: 'stop_launch';
  request_id: string;
  id: string;
}

/** A button of a backend's section was clicked. */
export interface ISectionActionMsg {
  type: 'section_action';
  request_id: string;
  section: string;
  action: string;
}

/** The sidebar is still there (sent every `ALIVE_EVERY_MS`; a silent one is dropped by the kernel). */
export interface IAliveMsg {
  type: 'alive';
}

/** How often an open sidebar says it is still there. */
export const ALIVE_EVERY_MS = 30_000;

export type FrontEndMsg = IGetStateMsg | ISetSettingsMsg | IStopLaunchMsg | ISectionActionMsg | IAliveMsg;

// -- validation ------------------------------------------------------------------------------

type Json = { [key: string]: unknown };

function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function isString(value: unknown): value is string {
  return typeof value === 'string';
}

function isNumber(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value);
}

function isStringArray(value: unknown): value is string[] {
  return Array.isArray(value) && value.every(isString);
}

export function isSettings(value: unknown): value is ISettings {
  return (
    isObject(value) &&
    (value.num_processes === null || isNumber(value.num_processes)) &&
    isString(value.start_method) &&
    isString(value.mixed_precision)
  );
}

function isGpu(value: unknown): value is IGpu {
  return (
    isObject(value) &&
    isNumber(value.index) &&
    isString(value.name) &&
    (value.memory_mib === null || isNumber(value.memory_mib))
  );
}

export function isInventory(value: unknown): value is IInventory {
  return (
    isObject(value) &&
    isObject(value.cpu) &&
    isNumber(value.cpu.count) &&
    Array.isArray(value.cuda) &&
    value.cuda.every(isGpu) &&
    isObject(value.tpu) &&
    isNumber(value.tpu.cores) &&
    (value.tpu.type === null || isString(value.tpu.type)) &&
    isString(value.device) &&
    isNumber(value.max_processes) &&
    isNumber(value.default_processes)
  );
}

export function isLaunchInfo(value: unknown): value is ILaunchInfo {
  return (
    isObject(value) &&
    isString(value.id) &&
    Array.isArray(value.ranks) &&
    value.ranks.every(isNumber) &&
    isObject(value.rank_status) &&
    Object.values(value.rank_status).every(isString) &&
    isString(value.status) &&
    isNumber(value.elapsed) &&
    isString(value.device) &&
    isString(value.start_method) &&
    (value.cell === null || isNumber(value.cell)) &&
    typeof value.waited_on === 'boolean' &&
    isNumber(value.attempt) &&
    isString(value.kind) &&
    isObject(value.places) &&
    Object.values(value.places).every(isString)
  );
}

const STYLE_WORD = /^[a-z][a-z0-9_-]{0,31}$/; // a word that may go into a class name

function isWord(value: unknown): value is string {
  return isString(value) && (value === '' || STYLE_WORD.test(value));
}

function isStatusRow(value: unknown): value is IStatusRow {
  return isObject(value) && isString(value.text) && isWord(value.style) && isWord(value.key) && isString(value.hint);
}

function isStatusAction(value: unknown): value is IStatusAction {
  return isObject(value) && isWord(value.id) && value.id !== '' && isString(value.label);
}

export function isStatusSection(value: unknown): value is IStatusSection {
  return (
    isObject(value) &&
    isString(value.title) &&
    isWord(value.state) &&
    Array.isArray(value.rows) &&
    value.rows.every(isStatusRow) &&
    Array.isArray(value.actions) &&
    value.actions.every(isStatusAction)
  );
}

function isSections(value: unknown): value is { [name: string]: IStatusSection | null } {
  return isObject(value) && Object.values(value).every(section => section === null || isStatusSection(section));
}

/** The message if `data` is a well-formed kernel message, else null. */
export function parseKernelMsg(data: unknown): KernelMsg | null {
  if (!isObject(data)) {
    return null;
  }
  switch (data.type) {
    case 'state':
      return isNumber(data.history) &&
        isInventory(data.inventory) &&
        isSettings(data.settings) &&
        isObject(data.choices) &&
        isStringArray(data.choices.start_method) &&
        isStringArray(data.choices.mixed_precision) &&
        Array.isArray(data.launches) &&
        data.launches.every(isLaunchInfo) &&
        isSections(data.sections)
        ? (data as unknown as IStateMsg)
        : null;
    case 'reply':
      return (data.request_id === null || isString(data.request_id)) &&
        typeof data.ok === 'boolean' &&
        (data.error === null || isString(data.error)) &&
        isSettings(data.settings)
        ? (data as unknown as IReplyMsg)
        : null;
    case 'launch':
      return isLaunchInfo(data.launch) ? (data as unknown as ILaunchMsg) : null;
    case 'settings':
      return isSettings(data.settings) ? (data as unknown as ISettingsMsg) : null;
    case 'section':
      return isString(data.name) && (data.section === null || isStatusSection(data.section))
        ? (data as unknown as ISectionMsg)
        : null;
    case 'hello':
      return { type: 'hello' };
    default:
      return null;
  }
}
