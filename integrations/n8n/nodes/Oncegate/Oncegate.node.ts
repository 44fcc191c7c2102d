import type {
	IDataObject,
	IExecuteFunctions,
	INodeExecutionData,
	INodeType,
	INodeTypeDescription,
	JsonObject,
} from 'n8n-workflow';
import { NodeApiError, NodeOperationError } from 'n8n-workflow';

import { properties } from './description';
import { effects, jsonValue, type EffectFields } from './effects';
import { problemText, sanitiseError } from './problem';
import { CLAIM_OUTPUTS, ClaimOutput, claimOutput } from './routing';
import { findRun, withRun, type RunRef } from './run';

/** Outputs per operation: Claim has one per answer, Record Model Output two. */
function outputsFor(parameters: { operation?: string }) {
	if ((parameters.operation ?? 'claim') === 'claim') {
		return ['Claimed', 'Duplicate', 'In Flight', 'Ended'].map((displayName) => ({
			type: 'main',
			displayName,
		}));
	}
	if (parameters.operation === 'recordOutput') {
		return ['Valid', 'Invalid'].map((displayName) => ({ type: 'main', displayName }));
	}
	return [{ type: 'main' }];
}

const NODE_TYPE_SUFFIX = '.oncegate';

interface Answer {
	status: number;
	body: IDataObject;
}

/** POSTs `body` to oncegate; 2xx and (when `allowed`) other statuses come back, the rest throw. */
async function call(
	ctx: IExecuteFunctions,
	itemIndex: number,
	path: string,
	body: IDataObject,
	allowed: number[] = [],
): Promise<Answer> {
	const credentials = await ctx.getCredentials('oncegateApi');
	const base = String(credentials.baseUrl ?? '').replace(/\/+$/, '');
	let response: { statusCode: number; body: unknown };
	try {
		response = (await ctx.helpers.httpRequestWithAuthentication.call(ctx, 'oncegateApi', {
			method: 'POST',
			url: `${base}${path}`,
			body,
			json: true,
			returnFullResponse: true,
			ignoreHttpStatusErrors: true,
			timeout: 30_000,
		})) as { statusCode: number; body: unknown };
	} catch (error) {
		throw new NodeApiError(ctx.getNode(), error as JsonObject, {
			message: `oncegate is unreachable at ${base}`,
			description: (error as Error).message,
			itemIndex,
		});
	}
	const status = response.statusCode;
	if ((status >= 200 && status < 300) || allowed.includes(status)) {
		return { status, body: (response.body ?? {}) as IDataObject };
	}
	const text = problemText(status, response.body);
	throw new NodeApiError(ctx.getNode(), (response.body ?? {}) as JsonObject, {
		message: text.message,
		description: text.description,
		httpCode: text.httpCode,
		itemIndex,
	});
}

/** The run this item belongs to: in the item, else on the nearest Oncegate node upstream. */
function runOf(ctx: IExecuteFunctions, item: INodeExecutionData, itemIndex: number): RunRef {
	const self = ctx.getNode().name;
	const upstream = ctx
		.getParentNodes(self)
		.filter((n) => n.type.endsWith(NODE_TYPE_SUFFIX) && !n.disabled)
		.map((n) => () => ctx.getWorkflowDataProxy(itemIndex).$(n.name).item?.json);
	const run = findRun(item.json, upstream);
	if (!run) {
		throw new NodeOperationError(
			ctx.getNode(),
			'No claimed run in this item',
			{
				itemIndex,
				description:
					'Owner operations act on the run an Oncegate Claim put into the item (json.oncegate). Connect this node after the Claimed output of a Claim node, directly or through other nodes.',
			},
		);
	}
	return run;
}

function parameterJson(ctx: IExecuteFunctions, name: string, i: number, label: string): unknown {
	try {
		return jsonValue(ctx.getNodeParameter(name, i), label);
	} catch (error) {
		throw new NodeOperationError(ctx.getNode(), (error as Error).message, { itemIndex: i });
	}
}

function effectsOf(ctx: IExecuteFunctions, i: number): IDataObject[] {
	const mode = ctx.getNodeParameter('effectsInput', i) as string;
	const fields = (ctx.getNodeParameter('effects.effect', i, []) as EffectFields[]) ?? [];
	const json = mode === 'json' ? ctx.getNodeParameter('effectsJson', i) : undefined;
	try {
		return effects(mode, fields, json);
	} catch (error) {
		throw new NodeOperationError(ctx.getNode(), (error as Error).message, { itemIndex: i });
	}
}

function correlationOf(json: IDataObject): string | undefined {
	const delivery = json.delivery as IDataObject | undefined;
	const id = delivery?.correlation_id;
	return typeof id === 'string' && id ? id : undefined;
}

/** One item: which output it leaves by and its JSON. */
async function runItem(
	ctx: IExecuteFunctions,
	operation: string,
	item: INodeExecutionData,
	i: number,
): Promise<[number, IDataObject]> {
	const json = item.json;
	if (operation === 'claim') {
		const options = ctx.getNodeParameter('claimOptions', i, {}) as IDataObject;
		const body: IDataObject = {
			namespace: ctx.getNodeParameter('namespace', i) as string,
			key: ctx.getNodeParameter('key', i) as string,
			execution_ref: ctx.getExecutionId(),
		};
		const payload = parameterJson(ctx, 'payload', i, 'Payload');
		if (payload !== undefined) body.payload = payload as IDataObject;
		if (options.businessKey) body.business_key = options.businessKey;
		if (options.operation) body.operation = options.operation;
		if (options.leaseMs) body.lease_ms = options.leaseMs;
		if (options.requestedBy) body.requested_by = options.requestedBy;
		if (options.workflowVersion) body.workflow_version = options.workflowVersion;
		const correlation = (options.correlationId as string) || correlationOf(json);
		if (correlation) body.correlation_id = correlation;
		const answer = await call(ctx, i, '/v1/claims', body);
		return [claimOutput(answer.body), withRun(json, answer.body, undefined)];
	}
	if (operation === 'reportFailedExecution') {
		const message = sanitiseError(ctx.getNodeParameter('errorMessage', i, ''));
		const node = ctx.getNodeParameter('failedNode', i, '') as string;
		const execution = json.execution as IDataObject | undefined;
		const errorClass = (execution?.error as IDataObject | undefined)?.name;
		const body: IDataObject = {
			execution_ref: String(ctx.getNodeParameter('executionRef', i) ?? ''),
			error: {
				message,
				...(node ? { node } : {}),
				...(typeof errorClass === 'string' && errorClass ? { class: errorClass } : {}),
			},
			retryable: ctx.getNodeParameter('reportRetryable', i) as boolean,
		};
		const answer = await call(ctx, i, '/v1/runs/fail-by-execution', body);
		return [0, { ...json, oncegate: { reported: answer.body.runs ?? [] } }];
	}

	const run = runOf(ctx, item, i);
	const owner: IDataObject = { namespace: run.namespace, key: run.key, lease: run.lease };
	switch (operation) {
		case 'complete': {
			owner.result = parameterJson(ctx, 'result', i, 'Result') as IDataObject;
			const answer = await call(ctx, i, '/v1/runs/complete', owner);
			return [0, withRun(json, answer.body, run)];
		}
		case 'fail': {
			owner.retryable = ctx.getNodeParameter('retryable', i) as boolean;
			owner.error = sanitiseError(ctx.getNodeParameter('error', i, ''));
			const answer = await call(ctx, i, '/v1/runs/fail', owner);
			return [0, withRun(json, answer.body, run)];
		}
		case 'renew': {
			const leaseMs = ctx.getNodeParameter('leaseMs', i, 0) as number;
			if (leaseMs) owner.lease_ms = leaseMs;
			const answer = await call(ctx, i, '/v1/runs/renew', owner);
			return [0, withRun(json, answer.body, run)];
		}
		case 'commit': {
			owner.result = parameterJson(ctx, 'result', i, 'Result') as IDataObject;
			owner.effects = effectsOf(ctx, i);
			const answer = await call(ctx, i, '/v1/runs/commit', owner);
			return [0, withRun(json, answer.body, run)];
		}
		case 'recordOutput': {
			const operationName = ctx.getNodeParameter('outputOperation', i, '') as string;
			owner.output = parameterJson(ctx, 'output', i, 'Output') as IDataObject;
			owner.model = {
				provider_class: ctx.getNodeParameter('providerClass', i) as string,
				model: ctx.getNodeParameter('model', i) as string,
				revision: ctx.getNodeParameter('revision', i) as string,
			};
			if (operationName) owner.operation = operationName;
			// 422 with violations is an answer here (the Invalid output), not an error.
			const answer = await call(ctx, i, '/v1/runs/output', owner, [422]);
			if (answer.status === 422 && Array.isArray(answer.body.violations)) {
				const invalid = { valid: false, ...answer.body } as IDataObject;
				return [1, withRun(json, { output: invalid }, run)];
			}
			if (answer.status === 422) {
				const text = problemText(422, answer.body);
				throw new NodeApiError(ctx.getNode(), answer.body as JsonObject, { ...text, itemIndex: i });
			}
			const lease = answer.body.lease;
			return [0, withRun(json, { ...(lease ? { lease } : {}), output: answer.body }, run)];
		}
		case 'requestApproval': {
			owner.effects = effectsOf(ctx, i);
			const callback = ctx.getNodeParameter('callbackUrl', i, '') as string;
			const summary = ctx.getNodeParameter('summary', i, '') as string;
			if (callback) owner.callback_url = callback;
			if (summary) owner.summary = summary;
			const answer = await call(ctx, i, '/v1/runs/gate', owner);
			// The gate takes the lease: the run now waits for a person.
			return [0, withRun(json, { state: answer.body.state, lease: null, approval: answer.body }, run)];
		}
		default:
			throw new NodeOperationError(ctx.getNode(), `Unknown operation ${operation}`, { itemIndex: i });
	}
}

export class Oncegate implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Oncegate',
		name: 'oncegate',
		icon: 'file:oncegate.svg',
		group: ['transform'],
		version: 1,
		subtitle: '={{$parameter["operation"]}}',
		description:
			'Make workflow side effects safe to retry: claim a key once, commit effects through oncegate\'s outbox, gate them on approval',
		defaults: {
			name: 'Oncegate',
		},
		inputs: ['main'],
		// eslint-disable-next-line n8n-nodes-base/node-class-description-outputs-wrong
		outputs: `={{(${outputsFor})($parameter)}}`,
		credentials: [
			{
				name: 'oncegateApi',
				required: true,
			},
		],
		properties,
	};

	async execute(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
		const items = this.getInputData();
		const operation = this.getNodeParameter('operation', 0) as string;
		const count = operation === 'claim' ? CLAIM_OUTPUTS.length : operation === 'recordOutput' ? 2 : 1;
		const out: INodeExecutionData[][] = Array.from({ length: count }, () => []);
		for (let i = 0; i < items.length; i++) {
			try {
				const [output, json] = await runItem(this, operation, items[i], i);
				out[output].push({ json, pairedItem: { item: i } });
			} catch (error) {
				if (this.continueOnFail()) {
					// Only `error` in the JSON: n8n's error output recognises the item
					// and merges the input item's JSON back in. A failed claim never
					// leaves by Claimed, nor a failed validation by Valid.
					const description = (error as NodeApiError).description;
					const route = operation === 'claim' ? ClaimOutput.Ended : operation === 'recordOutput' ? 1 : 0;
					out[route].push({
						json: { error: { message: (error as Error).message, ...(description ? { description } : {}) } },
						pairedItem: { item: i },
					});
					continue;
				}
				throw error;
			}
		}
		return out;
	}
}
